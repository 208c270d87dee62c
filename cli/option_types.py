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
PlanFwOpt = Annotated[str | None, typer.Option(
    "--framework", help="training stack to plan for: its capabilities limit the search and its behaviour prices it "
    "(generic, megatron-core, megatron (paper era), nemo, torchtitan, deepspeed, llm-foundry, ...); default: the "
    "launcher's framework with --format megatron|nemo|torchtitan|deepspeed, else megatron-core", show_default=False)]
RankByOpt = Annotated[str, typer.Option(
    "--rank-by", help="preference: layouts priced within the model's own error of the fastest tie, and a tie is "
    "ranked by what practitioners prefer (no offloading over PCIe, no needless CP, standard schedules, memory room); "
    "time: by predicted step time alone")]
MoeCapacityOpt = Annotated[float | None, typer.Option(
    "--moe-capacity-factor", min=0.01, max=64.0, help="token dropping: each expert takes at most this many times its "
    "even share of the routed tokens and drops the rest (Megatron-Core --moe-expert-capacity-factor); default "
    "dropless", show_default=False)]
MoePadOpt = Annotated[bool, typer.Option(
    "--moe-pad-to-capacity", help="with --moe-capacity-factor: pad every expert's input to its capacity (static "
    "shapes; priced as a full capacity of work)")]
SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", help="with --from: NAME=VALUE for what the file leaves open: a shell variable or positional argument "
    "(1=...), a torchtitan or NeMo key (training.local_batch_size=4; training=PATH for a NeMo launcher's base config), "
    "a Trainer argument behind a ds_config's \"auto\" (per_device_train_batch_size=4); repeatable",
    show_default=False)]
OptOffloadOpt = Annotated[float, typer.Option(
    "--optimizer-offload", min=0.0, max=1.0, help="share of optimizer states kept and stepped in CPU memory; "
    "priced as host-link traffic per step (PCIe or NVLink-C2C)")]
OptMomentsOpt = Annotated[str, typer.Option(
    "--optimizer-moments", help="dtype of Adam's moments: fp32 | bf16 (Megatron-Core's precision-aware "
    "optimizer; halves them)")]
Fp8RecipeOpt = Annotated[str, typer.Option(
    "--fp8-recipe", help="with --precision fp8: tensorwise (one scale per tensor) | blockwise (1x128 / 128x128 "
    "block scales as DeepSeek-V3 trains; slower GEMMs on Hopper)")]
