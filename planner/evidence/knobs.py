"""The knobs a published run may leave unstated: what each means and the values a recipe may give (the knob file's
vocabulary, validation/case_recipes.yaml), and how a source must be pinned. planner.evidence.recipes reads, checks
and applies them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from planner.inputs.frameworks import FRAMEWORKS
from planner.inputs.layout import CpComm, Schedule

SCHEDULE_LABELS = frozenset(s.label for s in Schedule)


def _flag(value: object) -> bool:
    return isinstance(value, bool)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _count_or_zero(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _word(*words: str) -> Callable[[object], bool]:
    return lambda value: isinstance(value, str) and value in words


def _catalog_gpu(value: object) -> bool:
    from planner.inputs.catalog import gpu_catalog  # the catalog reads package data: only when a file names a GPU

    return isinstance(value, str) and value in gpu_catalog()


def _layout_text(value: object) -> bool:
    from planner.inputs.launch_readers.megatron_model import layout_chunks

    if not isinstance(value, str):
        return False
    try:
        return len(layout_chunks(value)) > 1
    except ValueError:
        return False


@dataclass(frozen=True)
class KnobSpec:
    """One cost-relevant knob a published row may leave unstated: what it means and the values a recipe may give."""

    meaning: str
    legal: Callable[[object], bool]
    values: str  # the legal values, as an error message lists them


# The knobs, in the order the summary and the knob file list them.
KNOB_SPECS: dict[str, KnobSpec] = {
    "ep_overlap": KnobSpec("MoE all-to-all hidden behind another micro-batch's compute (Megatron-Core "
                           "overlap_moe_expert_parallel_comm with delay_wgrad_compute; the planner's combined-1f1b)",
                           _flag, "true | false"),
    "moe_dispatcher": KnobSpec("MoE token dispatcher (Megatron-Core moe_token_dispatcher_type; flex with the DeepEP or "
                               "HybridEP backend)", _word("alltoall", "allgather", "flex-deepep", "flex-hybridep"),
                               "alltoall | allgather | flex-deepep | flex-hybridep"),
    "moe_token_drop": KnobSpec("MoE token dropping: dropless, or the expert capacity factor (with `padded`: inputs "
                               "padded to capacity)", lambda v: v == "dropless" or (
                                   isinstance(v, int | float) and not isinstance(v, bool) and v > 0),
                               "dropless | a positive capacity factor"),
    "expert_tp": KnobSpec("tensor-parallel size of the expert layers (Megatron-Core expert_tensor_parallel_size; "
                          "left unset it is the tensor-parallel size, model_parallel_config.py __post_init__)", _count,
                          "a positive integer"),
    "moe_force_balance": KnobSpec("router forced to balance tokens evenly over experts (Megatron-Core "
                                  "moe_router_force_load_balancing, a benchmarking switch)", _flag, "true | false"),
    "tp_comm_overlap": KnobSpec("tensor-parallel collectives overlapped with GEMMs (Transformer Engine userbuffers, "
                                "torchtitan async TP)", _flag, "true | false"),
    "overlap_grad_reduce": KnobSpec("data-parallel gradient reduction overlapped with the backward pass", _flag,
                                    "true | false"),
    "overlap_param_gather": KnobSpec("sharded-parameter all-gather overlapped with the forward pass", _flag,
                                     "true | false"),
    "zero": KnobSpec("what the data ranks shard, as a ZeRO stage (Megatron-Core's distributed optimizer shards the "
                     "optimizer states and keeps a full gradient buffer: 1; FSDP / XLA fsdp axis: 3; hsdp)",
                     lambda v: v == "hsdp" or (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 3),
                     "0 | 1 | 2 | 3 | hsdp"),
    "cuda_graphs": KnobSpec("CUDA graph capture (per-layer scopes or the full iteration)",
                            _word("none", "per-layer", "full-iteration"), "none | per-layer | full-iteration"),
    "recompute": KnobSpec("activation recomputation (with its module list where selective) or host offloading",
                          _word("none", "selective", "full", "offload"), "none | selective | full | offload"),
    "fp8_recipe": KnobSpec("fp8 scaling recipe", _word("delayed", "tensorwise", "blockwise", "rowwise", "mxfp8"),
                           "delayed | tensorwise | blockwise | rowwise | mxfp8"),
    "torch_compile": KnobSpec("torch.compile of the model (`scope` lists what was compiled: model, loss)", _flag,
                              "true | false"),
    "sequence_parallel": KnobSpec("sequence parallelism beside tensor parallelism", _flag, "true | false"),
    "vpp": KnobSpec("model chunks per pipeline rank", _count, "a positive integer"),
    "micro_batch": KnobSpec("micro-batch size", _count, "a positive integer"),
    # Optional knobs: they count only where a recipe gives them (OPTIONAL_KNOBS), never as unresolved; without one
    # the run's stated framework, its schedules, a searched exchange and the stack's router stand.
    "stack": KnobSpec("the software that ran the row where the case's `framework` names another (Narayanan et al. "
                      "2021 ran their ZeRO-3 rows through DeepSpeed beside Megatron's PTD-P rows): the case is "
                      "priced with that stack's profile and ranked among that stack's runs",
                      lambda v: isinstance(v, str) and v in FRAMEWORKS, "a framework name plan knows"),
    "schedules": KnobSpec("the pipeline schedules the codebase that ran the row ships (a research fork's own "
                          "schedules are its standard ones): a schedule the row leaves open is searched among them, "
                          "and the `schedule` preference of `plan validate`'s ranking reads them instead of the "
                          "stack's",
                          lambda v: isinstance(v, list) and bool(v) and all(
                              isinstance(x, str) and x in SCHEDULE_LABELS for x in v),
                          "a list of schedule names"),
    "cp_comm": KnobSpec("the context-parallel exchange the run's code ran (Megatron-Core --cp-comm-type; a "
                        "Megatron-Core without that option runs Transformer Engine's p2p ring only)",
                        _word(*(c.label for c in CpComm)), " | ".join(c.label for c in CpComm)),
    "moe_router_fusion": KnobSpec("the MoE router as Transformer Engine's fused kernels (Megatron-Core "
                                  "--moe-router-fusion), which cuts the host ops a MoE layer issues; unstated, the "
                                  "stack's recipes' default", _flag, "true | false"),
    "attention_kernel": KnobSpec("the attention core's kernel as the run's software ran it: fused (cuDNN or "
                                 "FlashAttention) or unfused (batched GEMMs over the s x s scores in HBM, Transformer "
                                 "Engine's fallback where no fused kernel takes the shape)",
                                 _word("fused", "unfused"), "fused | unfused"),
    "fused_expert_mlp": KnobSpec("the routed experts' fc1, activation and fc2 as one CuTe DSL grouped-MLP kernel "
                                 "(Megatron-Bridge cutedsl_fused_grouped_mlp with Transformer Engine's op fuser) "
                                 "instead of Transformer Engine's GroupedLinear and a separate activation; not priced",
                                 _flag, "true | false"),
    "fp8_attention": KnobSpec("the attention core in fp8 (Transformer Engine fp8_dot_product_attention): priced at "
                              "the bf16 rate, but attention sinks then run on cuDNN's unified engine "
                              "(TrainingSpec.attention_kernel fp8)", _flag, "true | false"),
    "moe_rank_capacity": KnobSpec("each rank's expert buffers padded to this multiple of its mean load so that a "
                                  "full-iteration CUDA graph can capture dropless experts (Megatron-Core "
                                  "moe_expert_rank_capacity_factor with paged stashing); not priced",
                                  lambda v: isinstance(v, int | float) and not isinstance(v, bool) and v >= 1,
                                  "a number >= 1"),
    "gpu": KnobSpec("the GPU variant the run's machines had where the case's cluster names only its family (a "
                    "catalog key, clusters/gpus.yaml: e.g. H100s with HBM2e at a 500 W power limit): priced in place "
                    "of the cluster's GPU", _catalog_gpu, "a GPU key of clusters/gpus.yaml"),
    "pipeline_layout": KnobSpec("the layers of each pipeline model chunk as the run's recipe states them, in "
                                "Megatron-Core's --pipeline-model-parallel-layout notation (E embedding, t decoder "
                                "layer, m MTP layer, L loss, | between chunks): priced as stated in place of the "
                                "planner's split", _layout_text, "a layout string such as 'Et*4|t*4|tmL'"),
    "mtp_layers": KnobSpec("multi-token-prediction modules the run trained (Megatron-Core mtp_num_layers; DeepSeek-V3 "
                           "report §2.2: a block and the shared LM head again per module, on the last pipeline "
                           "stage), where the case's model block states none: priced as the model's "
                           "num_nextn_predict_layers. A pipeline layout's m count must agree (Megatron-Core asserts "
                           "it)", _count_or_zero, "a non-negative integer"),
}
OPTIONAL_KNOBS = ("stack", "schedules", "cp_comm", "moe_router_fusion", "attention_kernel", "fused_expert_mlp",
                  "fp8_attention", "moe_rank_capacity", "gpu", "pipeline_layout", "mtp_layers")
# A source pins what it cites: a repository at a commit (owner/repo@<hex>:path#Lx-Ly) or a versioned arXiv paper.
PINNED_SOURCE = re.compile(r"[\w.-]+/[\w.-]+@[0-9a-f]{7,40}:\S+|arXiv:\d{4}\.\d{4,5}v\d+")
