"""The typer annotations of options that several commands share."""

from __future__ import annotations

from typing import Annotated

import typer

ModelOpt = Annotated[str, typer.Option("--model", "-m", help="catalog name/alias (see 'plan models'), or a path to "
                                       "a model YAML or Hugging Face config.json")]
ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", help="{gpu}x{count} (h100x512, gb200x256) or a "
                                         "cluster YAML")]
SeqOpt = Annotated[int, typer.Option("--seq-len", help="tokens per sequence")]
GbsOpt = Annotated[int, typer.Option("--global-batch", help="sequences per optimizer step")]
PrecOpt = Annotated[str, typer.Option("--precision", help="bf16 | fp8 | fp4")]
FwOpt = Annotated[str, typer.Option("--framework", help="training stack whose behaviour and schedules to "
                                    "model: generic, megatron-core, megatron (paper era), nemo, torchtitan, "
                                    "deepspeed, llm-foundry, ...")]
PlanFwOpt = Annotated[str | None, typer.Option(
    "--framework", help="training stack to plan for: its capabilities limit the search and its behaviour prices it "
    "(generic, megatron-core, megatron (paper era), nemo, torchtitan, deepspeed, llm-foundry, ...); default: the "
    "launcher's framework with --format megatron|nemo|torchtitan|deepspeed, else generic", show_default=False)]
MoeCapacityOpt = Annotated[float | None, typer.Option(
    "--moe-capacity-factor", min=0.01, max=64.0, help="token dropping: each expert takes at most this many times its "
    "even share of the routed tokens and drops the rest (Megatron-Core --moe-expert-capacity-factor); default "
    "dropless", show_default=False)]
MoePadOpt = Annotated[bool, typer.Option(
    "--moe-pad-to-capacity", help="with --moe-capacity-factor: pad every expert's input to its capacity (static "
    "shapes; priced as a full capacity of work)")]
