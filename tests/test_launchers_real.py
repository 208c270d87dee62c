"""Launcher output fed to the real frameworks' own config code (CPU only); each part skips when its package is absent.

tests/test_launchers.py pins spelling and refusals against hand-written plan documents. Here the planner itself
(`python -m cli.main ... --format json`) produces the plan, the launcher text is rendered from it, and the text is
read back by the code that would consume it on a cluster:

* Megatron-LM flags -> megatron-core's ModelParallelConfig / TransformerConfig (their __post_init__ checks),
  DistributedDataParallelConfig, the constant microbatch calculator, the pipeline layer split
  (get_num_layers_to_build), the interleaved schedule table, and the rank-group generator (RankGenerator) that
  initialize_model_parallel builds its process groups from. When Megatron-LM's own `megatron.training` package is
  importable (it is not part of the megatron-core wheel), its argument parser and validate_args also read the flags.
* DeepSpeed ds_config JSON -> deepspeed.runtime.config.DeepSpeedConfig at the plan's data-parallel world size.

Install (CPU, no CUDA builds): `pip install --no-deps megatron-core` (needs only torch, numpy, packaging) and
`DS_BUILD_OPS=0 pip install deepspeed`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import shlex
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from planner.errors import PlanInputError
from planner.report.launchers import render

ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def _plan_json(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "cli.main", *args, "--format", "json"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


MCORE = ("--framework", "megatron-core")


def plan_doc(*args: str) -> dict:
    return json.loads(_plan_json(*args))


def layout(doc: dict, rank: int = 1) -> dict:
    return doc["plans"][rank - 1]["layout"]


# --------------------------------------------------------------------------------------------------- Megatron-LM

# (id, plan CLI arguments). Together these cover FSDP + CP, TP + SP + interleaved VPP, full recompute, MoE with
# expert parallelism alone and with TP, GQA/SwiGLU shapes, and MLA + shared experts + fp8.
MEGATRON_PROBLEMS = [
    ("llama70b-h100x512-default", ("--model", "llama70b", "--cluster", "h100x512")),
    ("llama70b-h100x512-tp8-pp4-vpp5",
     ("--model", "llama70b", "--cluster", "h100x512", "--fix", "tp=8", "--fix", "pp=4", "--fix", "vpp=5")),
    ("llama70b-h100x512-tp8-pp8-full",
     ("--model", "llama70b", "--cluster", "h100x512", "--fix", "tp=8", "--fix", "pp=8", "--fix", "recompute=full",
      "--framework", "megatron-core")),
    # generic picks a zb-h1 schedule here (Megatron lacks it) since overlapped collectives cost SMs: plan for the
    # stack the flags are for
    ("mixtral8x7b-h100x64-default",
     ("--model", "mixtral-8x7b", "--cluster", "h100x64", "--framework", "megatron-core")),
    ("mixtral8x7b-h100x64-ep8",
     ("--model", "mixtral-8x7b", "--cluster", "h100x64", "--fix", "ep=8", "--framework", "megatron-core")),
    ("mixtral8x22b-h100x256-ep8-tp2",
     ("--model", "mixtral-8x22b", "--cluster", "h100x256", "--fix", "ep=8", "--fix", "tp=2")),
    ("llama8b-h100x16-default", ("--model", "llama3-8b", "--cluster", "h100x16")),
    # Gated DeltaNet (Qwen3-Next) and DeepSeek sparse attention (V3.2): Megatron-Core's experimental attention
    # variants, with the heads, the per-layer pattern and the no-CP rule they assert
    ("qwen3next-h100x64", ("--model", str(ROOT / "tests/data/hf_configs/qwen3-next-80b-a3b.json"), "--cluster",
                           "h100x64", "--seq-len", "4096", "--global-batch", "512", "--framework", "megatron-core")),
    ("deepseekv32-h100x1024", ("--model", str(ROOT / "tests/data/hf_configs/deepseek-v3.2.json"), "--cluster",
                               "h100x1024", "--precision", "fp8", "--seq-len", "4096", "--global-batch", "1024",
                               "--framework", "megatron-core")),
    ("deepseekv3-h100x1024-fp8",  # MLA, dense first layers, shared expert, fp8 recipe
     ("--model", "deepseek-v3", "--cluster", "h100x1024", "--precision", "fp8", "--seq-len", "4096",
      "--global-batch", "8192", "--framework", "megatron-core")),  # generic may pick DualPipe, which Megatron lacks
    # Kimi K2 with Muon (Megatron-Bridge's recipe optimizer) on its published pipeline: a 61-layer custom layout,
    # the layer-wise distributed Muon without the distributed optimizer
    ("kimik2-gb300x256-muon-layout",
     ("--model", "kimi-k2", "--cluster", "gb300x256", "--precision", "fp8", "--seq-len", "4096", "--global-batch",
      "4096", "--optimizer", "muon", "--fix", "pp=4", "--fix", "vpp=4", "--fix", "ep=64",
      "--framework", "megatron-core")),
]


# megatron-core found that the renderer omitted --disable-bias-linear (Megatron-LM's default adds biases, and MoE with
# expert TP > 1 then asserts "Bias in Moe is only supported when ETP==1"); the renderer now emits it for SwiGLU models,
# and these cases guard it.
XFAIL_IDS: dict = {}


def parse_megatron(text: str) -> dict[str, list[str]]:
    """Flag -> values, from the rendered file (comment lines, then one shell-quoted flag per line)."""
    flags: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        flag, *values = shlex.split(line)
        assert flag.startswith("--"), line
        assert flag not in flags, f"{flag} given twice"
        flags[flag] = values
    return flags


def _int(flags: dict[str, list[str]], flag: str, default: int | None = None) -> int | None:
    if flag not in flags:
        return default
    (value,) = flags[flag]
    return int(value)


def _str(flags: dict[str, list[str]], flag: str) -> str | None:
    if flag not in flags:
        return None
    (value,) = flags[flag]
    return value


def _layout_vpp(flags: dict[str, list[str]]) -> int | None:
    """The virtual stages a --pipeline-model-parallel-layout implies, as arguments.py derives them (stage count over
    pp; None for one)."""
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    layout = _str(flags, "--pipeline-model-parallel-layout")
    if layout is None:
        return None
    stages = PipelineParallelLayerLayout.get_num_stages_from_str(layout)
    vpp = stages // _int(flags, "--pipeline-model-parallel-size", 1)
    return vpp if vpp > 1 else None


def transformer_config_kwargs(flags: dict[str, list[str]]) -> dict:
    """TransformerConfig fields from Megatron-LM flags, mapped as Megatron-LM's validate_args and
    core_transformer_config_from_args do (core_v0.15)."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    known = {
        "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size", "--cp-comm-type",
        "--hierarchical-context-parallel-sizes", "--sequence-parallel", "--num-virtual-stages-per-pipeline-rank",
        "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers", "--expert-model-parallel-size",
        "--expert-tensor-parallel-size", "--micro-batch-size", "--global-batch-size", "--seq-length", "--num-layers",
        "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--max-position-embeddings", "--kv-channels",
        "--group-query-attention", "--num-query-groups", "--swiglu", "--squared-relu",
        "--untie-embeddings-and-output-weights", "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank",
        "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim", "--num-experts", "--moe-router-topk",
        "--moe-ffn-hidden-size", "--moe-token-dispatcher-type", "--moe-shared-expert-intermediate-size",
        "--moe-layer-freq", "--moe-grouped-gemm", "--recompute-granularity", "--recompute-method",
        "--recompute-num-layers", "--use-megatron-fsdp", "--data-parallel-sharding-strategy",
        "--no-gradient-accumulation-fusion", "--ckpt-format", "--use-distributed-optimizer", "--overlap-grad-reduce",
        "--overlap-param-gather", "--bf16", "--fp16", "--fp8-format", "--fp8-recipe", "--fp8-amax-history-len",
        "--fp8-amax-compute-algo", "--fp8-param-gather", "--disable-bias-linear", "--moe-flex-dispatcher-backend",
        "--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute", "--recompute-modules",
        "--moe-expert-capacity-factor", "--moe-pad-expert-input-to-capacity",
        "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
        "--cpu-offloading-num-layers", "--moe-router-score-function", "--moe-router-pre-softmax",
        "--moe-router-num-groups", "--moe-router-group-topk", "--window-size", "--window-attn-skip-freq",
        "--mtp-num-layers", "--quick-geglu", "--activation-func-clamp-value", "--glu-linear-offset",
        "--softmax-type", "--add-qkv-bias", "--attention-output-gate", "--experimental-attention-variant",
        "--linear-attention-freq", "--linear-conv-kernel-dim", "--linear-key-head-dim", "--linear-value-head-dim",
        "--linear-num-key-heads", "--linear-num-value-heads", "--dsa-indexer-n-heads", "--dsa-indexer-head-dim",
        "--dsa-indexer-topk", "--no-rope-fusion", "--fine-grained-activation-offloading", "--offload-modules",
        # pretrain_mamba.py (hybrid models): the layer spec and the pattern are MambaModel arguments, read by
        # mamba_check; the rest are TransformerConfig fields
        "--spec", "--hybrid-override-pattern", "--is-hybrid-model", "--mamba-state-dim", "--mamba-head-dim",
        "--mamba-num-groups", "--mamba-num-heads", "--moe-latent-size", "--tp-comm-overlap",
        "--pipeline-model-parallel-layout", "--optimizer",
    }
    assert set(flags) <= known, f"flags this test does not map: {sorted(set(flags) - known)}"
    dtype = torch.bfloat16 if "--bf16" in flags else torch.float16 if "--fp16" in flags else torch.float32
    kw: dict = dict(
        tensor_model_parallel_size=_int(flags, "--tensor-model-parallel-size", 1),
        pipeline_model_parallel_size=_int(flags, "--pipeline-model-parallel-size", 1),
        context_parallel_size=_int(flags, "--context-parallel-size", 1),
        sequence_parallel="--sequence-parallel" in flags,
        tp_comm_overlap="--tp-comm-overlap" in flags,
        virtual_pipeline_model_parallel_size=_int(flags, "--num-virtual-stages-per-pipeline-rank")
        or _layout_vpp(flags),
        pipeline_model_parallel_layout=_str(flags, "--pipeline-model-parallel-layout"),
        num_layers_in_first_pipeline_stage=_int(flags, "--decoder-first-pipeline-num-layers"),
        num_layers_in_last_pipeline_stage=_int(flags, "--decoder-last-pipeline-num-layers"),
        account_for_embedding_in_pipeline_split="--account-for-embedding-in-pipeline-split" in flags,
        account_for_loss_in_pipeline_split="--account-for-loss-in-pipeline-split" in flags,
        expert_model_parallel_size=_int(flags, "--expert-model-parallel-size", 1),
        expert_tensor_parallel_size=_int(flags, "--expert-tensor-parallel-size"),
        num_layers=_int(flags, "--num-layers"),
        hidden_size=_int(flags, "--hidden-size"),
        ffn_hidden_size=_int(flags, "--ffn-hidden-size"),
        num_attention_heads=_int(flags, "--num-attention-heads"),
        kv_channels=_int(flags, "--kv-channels"),
        add_bias_linear="--disable-bias-linear" not in flags,  # Megatron-LM's default: linear layers have biases
        # Megatron-LM passes num_query_groups only with --group-query-attention (else None = one group per head).
        num_query_groups=_int(flags, "--num-query-groups") if "--group-query-attention" in flags else None,
        recompute_granularity=_str(flags, "--recompute-granularity"),
        recompute_method=_str(flags, "--recompute-method"),
        recompute_num_layers=_int(flags, "--recompute-num-layers"),
        **({"recompute_modules": flags["--recompute-modules"]} if "--recompute-modules" in flags else {}),
        # arguments.py validate_args: a positive --cpu-offloading-num-layers switches cpu_offloading on
        cpu_offloading=(_int(flags, "--cpu-offloading-num-layers", 0) or 0) > 0,
        cpu_offloading_num_layers=_int(flags, "--cpu-offloading-num-layers", 0),
        # TransformerConfig fields as flags (argument_utils.py: a bool field is store_true, a list field nargs "+")
        fine_grained_activation_offloading="--fine-grained-activation-offloading" in flags,
        offload_modules=flags.get("--offload-modules", []),
        # Megatron-LM defaults gradient_accumulation_fusion on (then turns it off without APEX/TE at start-up).
        gradient_accumulation_fusion=False,
        bf16="--bf16" in flags,
        fp16="--fp16" in flags,
        params_dtype=dtype,
        pipeline_dtype=dtype,
    )
    if "--swiglu" in flags:
        kw.update(gated_linear_unit=True, activation_func=F.silu)
    if "--quick-geglu" in flags:  # arguments.py: gated quick-GELU (gpt-oss), with its clamp and linear offset
        from megatron.core.fusions.fused_bias_geglu import quick_gelu

        kw.update(gated_linear_unit=True, activation_func=quick_gelu)
    if "--activation-func-clamp-value" in flags:
        kw["activation_func_clamp_value"] = float(_str(flags, "--activation-func-clamp-value"))
    if "--glu-linear-offset" in flags:
        kw["glu_linear_offset"] = float(_str(flags, "--glu-linear-offset"))
    if "--softmax-type" in flags:
        kw["softmax_type"] = _str(flags, "--softmax-type")
    if "--add-qkv-bias" in flags:
        kw["add_qkv_bias"] = True
    if "--mtp-num-layers" in flags:
        kw["mtp_num_layers"] = _int(flags, "--mtp-num-layers")
    if "--attention-output-gate" in flags:
        kw["attention_output_gate"] = True
    if "--is-hybrid-model" in flags:
        kw["is_hybrid_model"] = True
    for flag in ("--mamba-state-dim", "--mamba-head-dim", "--mamba-num-groups", "--mamba-num-heads",
                 "--moe-latent-size"):
        if flag in flags:  # TransformerConfig mamba_state_dim ... (transformer_config.py:846-857), moe_latent_size
            kw[flag.removeprefix("--").replace("-", "_")] = _int(flags, flag)
    if "--no-rope-fusion" in flags:
        kw["apply_rope_fusion"] = False
    if "--experimental-attention-variant" in flags:  # Megatron-Core's gated_delta_net / dsa variants
        kw["experimental_attention_variant"] = _str(flags, "--experimental-attention-variant")
        for flag in ("--linear-conv-kernel-dim", "--linear-key-head-dim", "--linear-value-head-dim",
                     "--linear-num-key-heads", "--linear-num-value-heads", "--dsa-indexer-n-heads",
                     "--dsa-indexer-head-dim", "--dsa-indexer-topk"):
            if flag in flags:
                kw[flag.removeprefix("--").replace("-", "_")] = _int(flags, flag)
        if "--linear-attention-freq" in flags:  # arguments.py moe_freq_type: an int or a list expression
            kw["linear_attention_freq"] = eval(_str(flags, "--linear-attention-freq"), {"__builtins__": {}})  # noqa: S307
    if "--window-size" in flags:  # arguments.py tuple_type: "left,right"
        kw["window_size"] = tuple(int(x) for x in _str(flags, "--window-size").strip("()").split(","))
    if "--window-attn-skip-freq" in flags:  # arguments.py moe_freq_type: an int or a list expression
        kw["window_attn_skip_freq"] = eval(_str(flags, "--window-attn-skip-freq"), {"__builtins__": {}})  # noqa: S307
    if "--cp-comm-type" in flags:
        kw["cp_comm_type"] = _str(flags, "--cp-comm-type")
    if "--hierarchical-context-parallel-sizes" in flags:
        kw["hierarchical_context_parallel_sizes"] = [int(x) for x in flags["--hierarchical-context-parallel-sizes"]]
    if "--num-experts" in flags:
        kw.update(
            num_moe_experts=_int(flags, "--num-experts"),
            moe_router_topk=_int(flags, "--moe-router-topk"),
            moe_ffn_hidden_size=_int(flags, "--moe-ffn-hidden-size"),
            moe_token_dispatcher_type=_str(flags, "--moe-token-dispatcher-type") or "allgather",
            moe_grouped_gemm="--moe-grouped-gemm" in flags,
            moe_shared_expert_intermediate_size=_int(flags, "--moe-shared-expert-intermediate-size"),
            overlap_moe_expert_parallel_comm="--overlap-moe-expert-parallel-comm" in flags,
            delay_wgrad_compute="--delay-wgrad-compute" in flags,
            moe_router_score_function=_str(flags, "--moe-router-score-function") or "softmax",
            moe_router_pre_softmax="--moe-router-pre-softmax" in flags,
            moe_router_num_groups=_int(flags, "--moe-router-num-groups"),
            moe_router_group_topk=_int(flags, "--moe-router-group-topk"),
        )
        if "--moe-flex-dispatcher-backend" in flags:
            kw["moe_flex_dispatcher_backend"] = _str(flags, "--moe-flex-dispatcher-backend")
        if "--moe-expert-capacity-factor" in flags:
            kw.update(moe_expert_capacity_factor=float(_str(flags, "--moe-expert-capacity-factor")),
                      moe_pad_expert_input_to_capacity="--moe-pad-expert-input-to-capacity" in flags)
        if "--moe-layer-freq" in flags:
            # Megatron-LM's moe_freq_type: an int, or a Python list expression such as ([0]*3+[1]*58).
            kw["moe_layer_freq"] = eval(_str(flags, "--moe-layer-freq"), {"__builtins__": {}})  # noqa: S307
    if "--multi-latent-attention" in flags:
        kw.update(multi_latent_attention=True, q_lora_rank=_int(flags, "--q-lora-rank"),
                  kv_lora_rank=_int(flags, "--kv-lora-rank"), qk_head_dim=_int(flags, "--qk-head-dim"),
                  qk_pos_emb_head_dim=_int(flags, "--qk-pos-emb-head-dim"), v_head_dim=_int(flags, "--v-head-dim"))
    if "--fp8-format" in flags:
        kw.update(fp8=_str(flags, "--fp8-format"), fp8_recipe=_str(flags, "--fp8-recipe"),
                  fp8_amax_history_len=_int(flags, "--fp8-amax-history-len"),
                  fp8_amax_compute_algo=_str(flags, "--fp8-amax-compute-algo"),
                  fp8_param="--fp8-param-gather" in flags)
    return kw


@contextlib.contextmanager
def _patched(module, name: str, value):
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def megatron_configs(flags: dict[str, list[str]]):
    """Build megatron-core's TransformerConfig (or MLATransformerConfig) and DistributedDataParallelConfig; their
    __post_init__ validation runs. A warning that says something "must" hold is an error in Megatron-LM's own
    validate_args (e.g. sequence parallelism with EP and TP), so it fails here too."""
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.transformer import transformer_config as tc

    kw = transformer_config_kwargs(flags)
    cls = tc.MLATransformerConfig if kw.get("multi_latent_attention") else tc.TransformerConfig
    with warnings.catch_warnings(record=True) as caught, contextlib.ExitStack() as stack:
        warnings.simplefilter("always")
        if kw.get("fp8"):
            # FP8 runs on Transformer Engine layers, and the MoE FP8 checks ask for its version; stand in a current
            # TE so that the checks themselves run on a machine without it.
            stack.enter_context(_patched(tc, "is_te_min_version", lambda *a, **k: True))
        config = cls(**kw)
    musts = [str(w.message) for w in caught if " must " in str(w.message)]
    assert not musts, musts
    fsdp = "--use-megatron-fsdp" in flags
    ddp = DistributedDataParallelConfig(
        overlap_grad_reduce="--overlap-grad-reduce" in flags,
        overlap_param_gather="--overlap-param-gather" in flags,
        use_distributed_optimizer="--use-distributed-optimizer" in flags,
        use_megatron_fsdp=fsdp,
        data_parallel_sharding_strategy=_str(flags, "--data-parallel-sharding-strategy") or "no_shard",
        fp8_param_gather="--fp8-param-gather" in flags,
    )
    return config, ddp


def rank_groups(world: int, config) -> tuple[dict, dict]:
    """The dense and expert rank generators exactly as initialize_model_parallel builds them (default order)."""
    from megatron.core.parallel_state import RankGenerator

    order = "tp-cp-ep-dp-pp"
    tp, pp, cp = config.tensor_model_parallel_size, config.pipeline_model_parallel_size, config.context_parallel_size
    assert world % (tp * pp * cp) == 0, f"world_size ({world}) is not divisible by {tp * pp * cp}"
    dense = RankGenerator(tp=tp, ep=1, dp=world // (tp * pp * cp), pp=pp, cp=cp, order=order)
    etp, ep = config.expert_tensor_parallel_size, config.expert_model_parallel_size
    assert world % (etp * ep * pp) == 0, f"world_size ({world}) is not divisible by etp x ep x pp = {etp * ep * pp}"
    expert = RankGenerator(tp=etp, ep=ep, dp=world // (etp * ep * pp), pp=pp, cp=1, order=order)
    assert dense.get_ranks("pp") == expert.get_ranks("pp"), "dense and expert pipeline groups differ"
    dense_groups = {tok: dense.get_ranks(tok) for tok in ("tp", "cp", "dp", "pp", "dp-cp", "tp-cp")}
    expert_groups = {tok: expert.get_ranks(tok) for tok in ("tp", "ep", "dp", "tp-ep")}
    return dense_groups, expert_groups


def assert_partition(groups: list[list[int]], world: int, size: int, what: str) -> None:
    assert all(len(g) == size for g in groups), f"{what}: group sizes {sorted({len(g) for g in groups})} != {size}"
    flat = sorted(r for g in groups for r in g)
    assert flat == list(range(world)), f"{what} groups do not partition ranks 0..{world - 1}"


def assert_in_nodes(groups: list[list[int]], gpus_per_node: int, what: str) -> None:
    for g in groups:
        assert len({r // gpus_per_node for r in g}) == 1, f"{what} group {g} spans nodes"


def megatron_check(doc: dict, rank: int = 1) -> dict[str, list[str]]:
    """Render plan `rank` of `doc` as Megatron-LM flags and run them through megatron-core."""
    from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
    from megatron.core.pipeline_parallel.schedules import get_schedule_table
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    lay, model = layout(doc, rank), doc["inputs"]["model"]
    world = doc["inputs"]["cluster"]["num_gpus"]
    flags = parse_megatron(render(doc, "megatron", rank))
    config, ddp = megatron_configs(flags)

    # The plan reaches megatron-core unchanged.
    tp, pp, cp = config.tensor_model_parallel_size, config.pipeline_model_parallel_size, config.context_parallel_size
    assert (tp, pp, cp) == (lay["tp"], lay["pp"], lay["cp"])
    assert config.expert_model_parallel_size == lay["ep"]
    assert (config.virtual_pipeline_model_parallel_size or 1) == lay["vpp"]
    assert config.sequence_parallel == bool(lay["sequence_parallel"])
    assert config.num_layers == model["num_hidden_layers"]
    assert config.num_attention_heads == model["num_attention_heads"]
    assert config.num_query_groups == model["num_key_value_heads"]  # __post_init__ fills None with the head count
    assert config.ffn_hidden_size == model["intermediate_size"]
    assert config.recompute_granularity == {"none": None, "offload": None, "offload-modules": None}.get(
        lay["recompute"], lay["recompute"])
    assert config.cpu_offloading == (lay["recompute"] == "offload")
    assert config.fine_grained_activation_offloading == (lay["recompute"] == "offload-modules")
    assert config.cpu_offloading_num_layers == lay.get("offload_layers", 0)
    if lay["zero"] >= 2:
        assert ddp.use_megatron_fsdp and ddp.data_parallel_sharding_strategy.startswith("optim_grads")
    muon = _str(flags, "--optimizer") in ("muon", "dist_muon")  # Megatron-Core's Muon refuses the distributed one
    assert ddp.use_distributed_optimizer == (lay["zero"] >= 1 and not muon)
    assert muon == (doc["inputs"]["training"].get("optimizer") == "muon")

    # Data parallel size as Megatron derives it from the world size, and the microbatch count it then runs.
    dp = world // (tp * pp * cp)
    assert dp == lay["dp"], f"Megatron derives dp={dp} from {world} GPUs; the plan says dp={lay['dp']}"
    calc = ConstantNumMicroBatchesCalculator(
        global_batch_size=_int(flags, "--global-batch-size"), micro_batch_size=_int(flags, "--micro-batch-size"),
        data_parallel_size=dp, decrease_batch_size_if_needed=False, rank=0)
    assert calc.get() == lay["num_microbatches"]
    assert calc.get_current_global_batch_size() == doc["inputs"]["training"]["global_batch"]
    assert _int(flags, "--seq-length") % (2 * cp) == 0 or cp == 1  # CP splits each sequence into 2 x cp chunks

    # Layers per pipeline rank and virtual stage, from megatron-core's own split.
    vpp = config.virtual_pipeline_model_parallel_size
    stated = config.pipeline_model_parallel_layout
    if stated is not None:  # the parsed layout's own table, [pp rank][virtual stage] (pipeline_parallel_layer_layout)
        from megatron.core.transformer.enums import LayerType

        built = [[stated.layout[p][v].count(LayerType.decoder) for v in range(vpp or 1)] for p in range(pp)]
        assert [built[s % pp][s // pp] for s in range(pp * (vpp or 1))] == lay["pipeline_layout"]
    else:
        built = [[get_num_layers_to_build(config, vp_stage=v if vpp else None, pp_rank=p) for v in range(vpp or 1)]
                 for p in range(pp)]
    assert sum(map(sum, built)) == config.num_layers, built
    # A chunk may hold no transformer layer only where the embedding or the loss fills it (account-for flags).
    edge = {(0, 0)} if config.account_for_embedding_in_pipeline_split else set()
    edge |= {(pp - 1, (vpp or 1) - 1)} if config.account_for_loss_in_pipeline_split else set()
    assert all(n > 0 or (p, v) in edge for p, stage in enumerate(built) for v, n in enumerate(stage)), built

    # Interleaved 1F1B: megatron-core's schedule table and forward_backward_pipelining_with_interleaving's checks.
    if vpp:
        m, group = calc.get(), config.microbatch_group_size_per_vp_stage
        assert pp <= group <= m, f"microbatch group {group} not in [pp={pp}, M={m}]"
        assert not 0 < m % group < pp, f"final microbatch group {m % group} < pp={pp}"
        table = get_schedule_table(m, vpp, group)
        assert sorted(table) == [(i, c) for i in range(m) for c in range(vpp)]

    # Process groups: every kind partitions all ranks, and TP (dense and expert) stays inside one NVLink node.
    dense, expert = rank_groups(world, config)
    etp, ep = config.expert_tensor_parallel_size, config.expert_model_parallel_size
    for tok, size in (("tp", tp), ("cp", cp), ("dp", dp), ("pp", pp), ("dp-cp", dp * cp), ("tp-cp", tp * cp)):
        assert_partition(dense[tok], world, size, tok)
    for tok, size in (("tp", etp), ("ep", ep), ("dp", world // (etp * ep * pp)), ("tp-ep", etp * ep)):
        assert_partition(expert[tok], world, size, "expert " + tok)
    if not doc["inputs"]["options"].get("allow_tp_across_nodes"):
        node = doc["inputs"]["cluster"]["gpus_per_node"]
        assert_in_nodes(dense["tp"], node, "TP")
        assert_in_nodes(expert["tp"], node, "expert TP")
    return flags


@pytest.fixture(scope="module")
def mcore():
    pytest.importorskip("torch", reason="megatron-core needs torch")
    return pytest.importorskip("megatron.core.transformer.transformer_config",
                               reason="megatron-core not installed (pip install --no-deps megatron-core)")


@pytest.mark.parametrize("args", [pytest.param(a, id=i, marks=XFAIL_IDS.get(i, ())) for i, a in MEGATRON_PROBLEMS])
def test_megatron_flags_pass_megatron_core(mcore, args):
    megatron_check(plan_doc(*args, "--top", "1"))


def test_megatron_pinned_interleaved_layout_reaches_megatron_core(mcore):
    doc = plan_doc("--model", "llama70b", "--cluster", "h100x512", "--fix", "tp=8", "--fix", "pp=4", "--fix", "vpp=5",
                   "--top", "1")
    flags = megatron_check(doc)
    assert flags["--num-virtual-stages-per-pipeline-rank"] == ["5"]
    config, _ = megatron_configs(flags)
    assert config.virtual_pipeline_model_parallel_size == 5
    assert config.microbatch_group_size_per_vp_stage == 4  # defaults to pp
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    assert {get_num_layers_to_build(config, vp_stage=v, pp_rank=p) for p in range(4) for v in range(5)} == {4}


def test_megatron_moe_layout_reaches_megatron_core(mcore):
    doc = plan_doc("--model", "mixtral-8x22b", "--cluster", "h100x256", "--fix", "ep=8", "--fix", "tp=2",
                   "--fix", "etp=tp", "--top", "1")
    flags = megatron_check(doc)
    config, _ = megatron_configs(flags)
    assert config.num_moe_experts == 8 and config.expert_model_parallel_size == 8
    assert config.expert_tensor_parallel_size == 2
    # ep 8 x expert tp 2 spans two 8-GPU nodes: the node-deduplicated (DeepEP) dispatch the planner prices there
    assert config.moe_token_dispatcher_type == "flex" and config.moe_flex_dispatcher_backend == "deepep"
    _, expert = rank_groups(256, config)
    assert all(len(g) == 8 for g in expert["ep"])


def test_megatron_fp8_moe_selective_recompute_uses_current_scaling(mcore):
    """Megatron-Core refuses moe_act/layernorm recompute under delayed fp8 scaling: the launcher switches the
    recipe to per-tensor current scaling, and the config then builds."""
    doc = plan_doc("--model", "mixtral-8x7b", "--cluster", "h100x64", "--precision", "fp8", "--fix", "ep=8",
                   "--fix", "recompute=selective", "--top", "1")
    flags = megatron_check(doc)
    assert flags["--fp8-recipe"] == ["tensorwise"] and "--fp8-amax-history-len" not in flags
    assert {"moe_act", "layernorm"} <= set(flags["--recompute-modules"])
    config, _ = megatron_configs(flags)
    assert config.fp8_recipe == "tensorwise"


def test_megatron_token_drop_reaches_megatron_core(mcore):
    """Token drop across nodes (ep 8 x tp 2 spans two nodes): the capacity factor and padding reach megatron-core on
    the alltoall dispatcher (it refuses padding with DeepEP), and the config builds."""
    doc = plan_doc("--model", "mixtral-8x22b", "--cluster", "h100x256", "--fix", "ep=8", "--fix", "tp=2",
                   "--fix", "etp=tp", "--moe-capacity-factor", "1.25", "--moe-pad-to-capacity", "--top", "1")
    flags = megatron_check(doc)
    config, _ = megatron_configs(flags)
    assert config.moe_expert_capacity_factor == 1.25 and config.moe_pad_expert_input_to_capacity
    assert config.moe_token_dispatcher_type == "alltoall"


def test_megatron_whole_experts_reach_megatron_core(mcore):
    """etp=1 (MoE parallel folding): Megatron-Core builds an expert grid of ep x 1 independent of tp."""
    doc = plan_doc("--model", "mixtral-8x22b", "--cluster", "h100x256", "--fix", "ep=8", "--fix", "tp=2",
                   "--fix", "etp=1", "--framework", "megatron-core", "--top", "1")
    flags = megatron_check(doc)
    assert flags["--expert-tensor-parallel-size"] == ["1"]
    config, _ = megatron_configs(flags)
    assert config.expert_tensor_parallel_size == 1 and config.expert_model_parallel_size == 8
    # 8 whole-expert ranks fit one 8-GPU node: the plain all-to-all dispatcher, no DeepEP
    assert config.moe_token_dispatcher_type == "alltoall"


def test_megatron_every_ranked_plan_passes_megatron_core(mcore):
    """All top-5 plans of a few problems: those the renderer prints must all pass megatron-core."""
    printed = 0
    for args in (("--model", "llama70b", "--cluster", "h100x512"), ("--model", "mixtral-8x7b", "--cluster", "h100x64"),
                 ("--model", "llama3-8b", "--cluster", "h100x64", "--seq-len", "32768")):
        doc = plan_doc(*args, "--top", "5")
        for rank in range(1, len(doc["plans"]) + 1):
            try:
                megatron_check(doc, rank)
            except PlanInputError:
                continue  # refused with a reason: tests/test_launchers.py covers refusals
            printed += 1
    assert printed >= 5


@pytest.mark.parametrize("model, pp", [("deepseek-v3", 4), ("llama70b", 2)])
def test_megatron_fine_grained_offloading_reaches_megatron_core(mcore, model, pp):
    """recompute=offload-modules with pipelining (which layer-level offloading refuses): megatron-core's
    TransformerConfig takes the flags, with the attention pair, and expert_fc1 only where there are experts."""
    doc = plan_doc("--model", model, "--cluster", "gb200x256", "--framework", "megatron-core",
                   "--fix", "recompute=offload-modules", "--fix", f"pp={pp}", "--top", "1")
    config, _ = megatron_configs(megatron_check(doc))
    assert config.fine_grained_activation_offloading and not config.cpu_offloading
    assert config.offload_modules == ["core_attn", "attn_proj"] + (["expert_fc1"] if config.num_moe_experts else [])
    assert config.pipeline_model_parallel_size == pp and config.recompute_granularity is None
    with pytest.raises(ValueError, match="attn_proj"):  # the pair Megatron-Core keeps together
        megatron_configs({**megatron_check(doc), "--offload-modules": ["attn_proj"]})


def test_megatron_flags_pass_megatron_lm_argument_parser(mcore, monkeypatch):
    """Megatron-LM's own parse_args + validate_args (only where the Megatron-LM repository is importable)."""
    arguments = pytest.importorskip("megatron.training.arguments",
                                    reason="Megatron-LM's megatron.training is not in the megatron-core wheel")
    doc = plan_doc("--model", "llama70b", "--cluster", "h100x512", "--fix", "tp=8", "--fix", "pp=4", "--fix", "vpp=5",
                   "--top", "1")
    text = render(doc, "megatron")
    argv = [tok for line in text.splitlines() if not line.startswith("#") for tok in shlex.split(line)]
    world = str(doc["inputs"]["cluster"]["num_gpus"])
    monkeypatch.setattr(sys, "argv", ["pretrain_gpt.py", *argv, "--tokenizer-type", "NullTokenizer",
                                      "--vocab-size", "128256", "--mock-data", "--train-iters", "1", "--lr", "1e-4"])
    monkeypatch.setenv("WORLD_SIZE", world)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    args = arguments.parse_args()
    arguments.validate_args(args)
    assert args.data_parallel_size == layout(doc)["dp"]
    assert args.virtual_pipeline_model_parallel_size == 5
    config = arguments.core_transformer_config_from_args(args)
    assert config.num_query_groups == 8


# ------------------------------------------------------------------------------------------ Megatron-LM, hybrids

# Mamba hybrids through pretrain_mamba.py: Nemotron-H (Mamba-2, attention, MLP) with an uneven pipeline, Nemotron 3
# Nano (Mamba-2, attention, MoE) with expert parallelism and with a pipeline.
MAMBA_PROBLEMS = [
    ("nemotron-h-56b-h100x256-pp4", ("--model", str(ROOT / "tests/data/hf_configs/nemotron-h-56b.json"),
                                     "--cluster", "h100x256", "--fix", "pp=4", "--framework", "megatron-core")),
    ("nemotron-h-56b-h100x64", ("--model", str(ROOT / "tests/data/hf_configs/nemotron-h-56b.json"),
                                "--cluster", "h100x64", "--framework", "megatron-core")),
    ("nemotron-3-nano-h100x64", ("--model", str(ROOT / "tests/data/hf_configs/nemotron-3-nano-30b-a3b.json"),
                                 "--cluster", "h100x64", "--framework", "megatron-core")),
    ("nemotron-3-nano-h100x64-pp2", ("--model", str(ROOT / "tests/data/hf_configs/nemotron-3-nano-30b-a3b.json"),
                                     "--cluster", "h100x64", "--framework", "megatron-core", "--fix", "pp=2",
                                     "--fix", "tp=2")),
]


class _PipelineRank:
    """The two calls MambaStack makes on its pipeline process group."""

    def __init__(self, rank: int, size: int):
        self._rank, self._size = rank, size

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size


def mamba_check(doc: dict, rank: int = 1) -> dict[str, list[str]]:
    """megatron_check, then megatron-core's own hybrid code: allocate_layers validates the pattern against
    --num-layers (length and symbols), and MambaStack._select_layers_for_pipeline_parallel hands each pipeline
    rank its slice of it, which must be the split the plan was priced with."""
    from megatron.core.ssm.mamba_block import MambaStack
    from megatron.core.ssm.mamba_hybrid_layer_allocation import allocate_layers

    flags = megatron_check(doc, rank)
    config, _ = megatron_configs(flags)
    model, lay = doc["inputs"]["model"], layout(doc, rank)
    assert flags["--spec"] == ["megatron.core.models.mamba.mamba_layer_specs", "mamba_stack_spec"]
    pattern = _str(flags, "--hybrid-override-pattern")
    layers = allocate_layers(config.num_layers, 0.0, 0.0, pattern)
    assert len(layers) == model["num_hidden_layers"] and config.is_hybrid_model
    mixers = {"M": "mamba", "*": "full_attention", "-": "none", "E": "none"}
    assert [mixers[c] for c in layers] == model["layer_types"]
    assert [c == "E" for c in layers] == [k == "moe" for k in model["mlp_layer_types"]]
    assert (config.mamba_num_heads, config.mamba_head_dim, config.mamba_state_dim, config.mamba_num_groups) == (
        model["mamba_num_heads"], model["mamba_head_dim"], model["ssm_state_size"], model.get("n_groups", 1))
    pp = config.pipeline_model_parallel_size
    slices = [MambaStack._select_layers_for_pipeline_parallel(
        SimpleNamespace(config=config, pp_group=_PipelineRank(p, pp)), layers) for p in range(pp)]
    assert [offset for offset, _ in slices] == [sum(len(x) for _, x in slices[:p]) for p in range(pp)]
    assert [c for _, chunk in slices for c in chunk] == layers
    first, last = lay.get("first_stage_layers"), lay.get("last_stage_layers")
    if pp > 1 and (first or last):
        assert (len(slices[0][1]), len(slices[-1][1])) == (first or len(slices[0][1]), last or len(slices[-1][1]))
    # MambaMixer's start-up asserts (ssm/mamba_mixer.py:249-262); the mixer itself needs triton to import
    tp = config.tensor_model_parallel_size
    assert config.mamba_num_heads % tp == 0 and config.mamba_num_groups % tp == 0
    assert config.mamba_num_heads % config.mamba_num_groups == 0
    return flags


@pytest.mark.parametrize("args", [pytest.param(a, id=i) for i, a in MAMBA_PROBLEMS])
def test_mamba_flags_pass_megatron_core(mcore, args):
    flags = mamba_check(plan_doc(*args, "--top", "1"))
    assert "--num-virtual-stages-per-pipeline-rank" not in flags  # MambaStack asserts no VPP (core_v0.16)


def test_mamba_pipeline_split_reaches_megatron_core(mcore):
    """Nemotron-H's 118 layers over pp 4: megatron-core's MambaStack gives the end stages the counts the plan
    priced, and a pattern one layer short is refused by megatron-core itself."""
    doc = plan_doc(*MAMBA_PROBLEMS[0][1], "--top", "1")
    assert layout(doc)["pp"] == 4
    flags = mamba_check(doc)
    from megatron.core.ssm.mamba_hybrid_layer_allocation import allocate_layers

    pattern = _str(flags, "--hybrid-override-pattern")
    with pytest.raises(ValueError, match="wrong length"):
        allocate_layers(_int(flags, "--num-layers"), 0.0, 0.0, pattern[:-1])
    with pytest.raises(ValueError):
        allocate_layers(_int(flags, "--num-layers"), 0.0, 0.0, pattern[:-1] + "G")


def test_every_ranked_mamba_plan_passes_megatron_core(mcore):
    """All top-5 plans the renderer prints for the two hybrids pass megatron-core (none is refused for the
    framework's own top picks)."""
    for _, args in MAMBA_PROBLEMS[1:3]:
        doc = plan_doc(*args, "--top", "5")
        for rank in range(1, len(doc["plans"]) + 1):
            mamba_check(doc, rank)


# ----------------------------------------------------------------------------------------------------- DeepSpeed


class _DataParallelOnly:
    """Minimal `mpu` for DeepSpeedConfig: DeepSpeed asks it for the data-parallel world size."""

    def __init__(self, dp: int):
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp


def deepspeed_config(config: dict, dp: int, monkeypatch):
    """DeepSpeedConfig as deepspeed.initialize builds it on rank 0 of a `dp`-way data-parallel job.

    Without an initialised deepspeed.comm, DeepSpeedConfig falls back to world_size 1; pretending rank 0 of an
    initialised job and handing it an mpu makes it use `dp`, with no process group needed."""
    from deepspeed.runtime import config as ds_config

    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    parsed = ds_config.DeepSpeedConfig(config, mpu=_DataParallelOnly(dp))
    assert parsed.world_size == dp
    return parsed


def _enabled(parsed, precision: str) -> bool:
    """bf16/fp16 switch as DeepSpeed parsed it (0.18+: `<precision>_config.enabled`; older: `<precision>_enabled`)."""
    section = getattr(parsed, f"{precision}_config", None)
    return bool(section.enabled if section is not None else getattr(parsed, f"{precision}_enabled"))


@pytest.fixture(scope="module")
def deepspeed_pkg():
    pytest.importorskip("torch", reason="DeepSpeed needs torch")
    return pytest.importorskip("deepspeed.runtime.config",
                               reason="DeepSpeed not installed (DS_BUILD_OPS=0 pip install deepspeed)")


def ds_config_of(text: str) -> dict:
    """The ds_config a `--format deepspeed` script writes (its here-document), as the shell would write it."""
    from planner.inputs.launch_readers.shell import read_script

    return json.loads(read_script(text, "plan.sh").files["ds_config.json"])


@pytest.mark.parametrize("args", [
    # DeepSpeed's own capabilities, as `--format deepspeed` plans: the launch (llama70b on 512 H100)
    ("--model", "llama70b", "--cluster", "h100x512", "--framework", "deepspeed"),
    ("--model", "llama70b", "--cluster", "h100x512", "--framework", "deepspeed", "--fix", "tp=8"),
    ("--model", "llama3-8b", "--cluster", "h100x16", "--fix", "tp=1", "--fix", "pp=1", "--fix", "zero=3",
     "--framework", "deepspeed", "--param-offload", "--optimizer-offload", "1"),
    ("--model", "llama3-8b", "--cluster", "h100x16", "--fix", "tp=1", "--fix", "pp=1", "--fix", "cp=1",
     "--fix", "recompute=none", "--fix", "zero=1", "--seq-len", "4096"),
    ("--model", "llama2-7b", "--cluster", "h100x64", "--fix", "tp=1", "--fix", "pp=1", "--fix", "cp=1",
     "--fix", "recompute=none", "--seq-len", "2048", "--global-batch", "1024"),
], ids=["llama70b-h100x512", "llama70b-h100x512-autotp8", "llama8b-h100x16-zero3-offload", "llama8b-h100x16-zero1",
        "llama7b-h100x64"])
def test_deepspeed_config_parses_in_deepspeed(deepspeed_pkg, monkeypatch, args):
    """DeepSpeedConfig at the plan's data-parallel world (AutoTP and Ulysses ranks hold one replica between them:
    DeepSpeed's mpu / sequence_parallel_size divide the world by them) derives the plan's batch, and reads the
    AutoTP degree, the Ulysses degree and the offloads as planned."""
    doc = plan_doc(*args, "--top", "1")
    lay = layout(doc)
    try:
        text = render(doc, "deepspeed")
    except PlanInputError as err:
        pytest.fail(f"the pinned plan was refused: {err}")
    config = ds_config_of(text)
    parsed = deepspeed_config(config, lay["dp"], monkeypatch)
    # What DeepSpeed derived (and asserted: train_batch == micro x accumulation x world) is the plan.
    assert parsed.train_batch_size == doc["inputs"]["training"]["global_batch"]
    assert parsed.train_micro_batch_size_per_gpu == lay["micro_batch"]
    assert parsed.gradient_accumulation_steps == lay["num_microbatches"]
    assert parsed.zero_enabled == (lay["zero"] > 0)
    assert parsed.zero_optimization_stage == lay["zero"]
    assert _enabled(parsed, "bfloat16") and not _enabled(parsed, "float16")
    if lay["zero"] >= 1:
        assert parsed.zero_config.overlap_comm and parsed.zero_config.contiguous_gradients
    assert parsed.tensor_parallel_config.autotp_size == (lay["tp"] if lay["tp"] > 1 else 0)
    assert config.get("sequence_parallel_size", 1) == lay["cp"]
    training = doc["inputs"]["training"]
    assert (parsed.zero_config.offload_param is not None) == bool(training.get("param_offload"))
    assert (parsed.zero_config.offload_optimizer is not None) == (training.get("optimizer_offload", 0) > 0)
    # DeepSpeed fills any one missing batch key from the other two; it must land on the same numbers.
    for dropped in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        partial = {k: v for k, v in config.items() if k != dropped}
        again = deepspeed_config(partial, lay["dp"], monkeypatch)
        assert (again.train_batch_size, again.train_micro_batch_size_per_gpu, again.gradient_accumulation_steps) == (
            parsed.train_batch_size, parsed.train_micro_batch_size_per_gpu, parsed.gradient_accumulation_steps)


def test_deepspeed_rejects_a_wrong_world_size(deepspeed_pkg, monkeypatch):
    """The check above is live: the same config at another data-parallel size trips DeepSpeed's batch assert."""
    doc = plan_doc("--model", "llama3-8b", "--cluster", "h100x16", "--fix", "tp=1", "--fix", "pp=1", "--fix", "zero=3",
                   "--framework", "deepspeed", "--top", "1")
    config = ds_config_of(render(doc, "deepspeed"))
    with pytest.raises(AssertionError, match="train_batch_size is not equal"):
        deepspeed_config(config, layout(doc)["dp"] * 2, monkeypatch)


def test_embedding_loss_split_reaches_megatron_core(mcore):
    """Llama 3 405B interleaved at pp16: 126 layers do not split into 16 x 8 chunks, 126 + embedding + loss do;
    megatron-core's TransformerConfig accepts the flags the plan prints, and refuses the same plan at vpp 3."""
    doc = plan_doc("--model", "llama3-405b", "--cluster", "h100x2048", "--global-batch", "512", "--framework",
                   "megatron-core", "--fix", "tp=8", "--fix", "pp=16", "--fix", "vpp=8", "--top", "1")
    assert layout(doc)["stage_split"] == "embedding_loss"
    assert (layout(doc)["first_stage_layers"], layout(doc)["last_stage_layers"]) == (7, 7)
    flags = megatron_check(doc)
    assert "--account-for-embedding-in-pipeline-split" in flags and "--decoder-first-pipeline-num-layers" not in flags
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    config = megatron_configs(flags)[0]
    per_rank = [sum(get_num_layers_to_build(config, vp_stage=v, pp_rank=p) for v in range(8)) for p in range(16)]
    assert per_rank == [7] + [8] * 14 + [7]  # the split the cost model priced
    with pytest.raises(ValueError):
        megatron_configs(dict(flags, **{"--num-virtual-stages-per-pipeline-rank": ["3"]}))


def test_megatron_config_mapping_is_live(mcore):
    """The Megatron check is live too: megatron-core rejects a flag set that breaks its rules."""
    flags = parse_megatron(render(plan_doc("--model", "llama70b", "--cluster", "h100x512", "--fix", "tp=8",
                                           "--fix", "pp=4", "--fix", "vpp=5", "--top", "1"), "megatron"))
    bad = dict(flags, **{"--num-query-groups": ["3"]})  # 3 KV groups over tp=8
    with pytest.raises(ValueError):
        megatron_configs(bad)
    assert dataclasses.is_dataclass(megatron_configs(flags)[0])


_MCORE_TOP1 = ("--top", "1", "--framework", "megatron-core")  # the stack the flags are for


def test_megatron_router_gate_reaches_megatron_core(mcore, tmp_path):
    """The router's gate is the model's: DeepSeek-V3 (config scoring_func) and Llama 4 (sigmoid in HF's Llama4TextMoe,
    no key) launch with --moe-router-score-function sigmoid; Llama 4's top-1 router would otherwise trip Megatron-Core's
    "Please use --moe-router-pre-softmax when topk is 1"; a softmax top-1 model gets the pre-top-k softmax; Mixtral's
    softmax top-2 neither."""
    doc = plan_doc("--model", "llama4-maverick", "--cluster", "h100x512", *_MCORE_TOP1)
    flags = megatron_check(doc)
    assert flags["--moe-router-score-function"] == ["sigmoid"] and flags["--moe-router-topk"] == ["1"]
    flags = megatron_check(plan_doc("--model", "deepseek-v3", "--cluster", "h800x2048", *_MCORE_TOP1))
    assert flags["--moe-router-score-function"] == ["sigmoid"]
    # node-limited routing, as the all-to-all was priced: 8 groups, 4 per token (DeepSeek-V3 report §2.1.2)
    assert flags["--moe-router-num-groups"] == ["8"] and flags["--moe-router-group-topk"] == ["4"]
    config, _ = megatron_configs(flags)
    assert (config.moe_router_num_groups, config.moe_router_group_topk) == (8, 4)
    flags = megatron_check(plan_doc("--model", "mixtral-8x7b", "--cluster", "h100x64", *_MCORE_TOP1))
    assert "--moe-router-score-function" not in flags and "--moe-router-pre-softmax" not in flags
    switch = tmp_path / "top1-softmax.yaml"
    switch.write_text("name: top1-softmax\nhidden_size: 4096\nnum_hidden_layers: 32\nnum_attention_heads: 32\n"
                      "num_key_value_heads: 8\nintermediate_size: 14336\nvocab_size: 32000\nnum_local_experts: 16\n"
                      "num_experts_per_tok: 1\n")
    flags = megatron_check(plan_doc("--model", str(switch), "--cluster", "h100x64", *_MCORE_TOP1))
    assert "--moe-router-pre-softmax" in flags and "--moe-router-score-function" not in flags


def test_hf_routers_that_gate_by_sigmoid_without_saying_so():
    """Llama 4 (Llama4TextMoe), GLM-4.5 MoE and Nemotron-H MoE (their routers are DeepseekV3TopkRouter) gate by
    sigmoid without a scoring_func key; Qwen3's router is a softmax."""
    from planner.inputs.catalog import model_from_mapping

    data = ROOT / "tests" / "data" / "hf_configs"
    gates = {name: model_from_mapping(json.loads((data / f"{name}.json").read_text()), name).scoring_func
             for name in ("llama-4-scout", "nemotron-3-super-120b-a12b", "glm-5", "qwen3-30b-a3b")}
    assert gates == {"llama-4-scout": "sigmoid", "nemotron-3-super-120b-a12b": "sigmoid", "glm-5": "sigmoid",
                     "qwen3-30b-a3b": "softmax"}
