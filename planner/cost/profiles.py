"""Framework profiles: the few behaviours that differ between training stacks, each a physical quantity. What a
stack can run at all (schedules, ZeRO stages, CP) is planner.inputs.frameworks.

Used by `training.framework` (validation cases) and `--framework` (planning). Values and where they come from:
- grad_bytes: bytes per gradient element kept between micro-batches. Megatron-LM keeps fp32 "main grads"
  (docs/user-guide/features/dist_optimizer.md: 18 bytes/param = 2 bf16 param + 4 fp32 grad + 12 optimizer).
  FSDP2 in torchtitan reduces and keeps fp32 grads (configs.py mixed_precision_reduce="float32").
- weight_bytes / optimizer_bytes: bytes per parameter of the persistent weights and of the optimizer states.
  Megatron: bf16 weights (2) + fp32 master and two Adam moments (12). FSDP (torchtitan, llm-foundry): the fp32
  parameter shard is itself the master (4) + two moments (8); bf16 copies are gathered per use.
- grad_reduce_bytes: bytes per element sent by the data-parallel gradient reduction (fp32 in Megatron by default,
  `--grad-reduce-in-bf16` halves it; FSDP mixed precision "PURE" in llm-foundry reduces in bf16). NeMo /
  Megatron-Bridge performance recipes keep and reduce gradients in bf16 (scripts/performance perf recipes set
  `ddp.grad_reduce_in_fp32 = False`): 2 and 2 there, and the nemo launcher writes that override.
- tp_overlap: share of tensor-parallel collective time hidden behind GEMMs. Off by default in Megatron-LM
  (`--tp-comm-overlap` opt-in); NeMo recipes turn on Transformer Engine userbuffer overlap (ecosystem.md §4),
  whose bulk + pipelined overlap hides most but not all of it (torchtitan async-TP gains 1.04-1.16x,
  cost_model.md §3.2); 0.6 is that judgement, not a fit.
- dp_overlap: share of the last micro-batch's backward that hides the gradient reduction (`--overlap-grad-reduce`,
  FSDP prefetch). DeepSpeed's overlap_comm (Megatron-DeepSpeed, GPT-NeoX) reduces earlier buckets during backward
  but leaves the last ones exposed: 0.5 there, a judgement rather than a fit.
- deepep: the stack dispatches MoE tokens with DeepEP-style node-deduplicated kernels (Megatron-Core
  `--moe-token-dispatcher-type flex` with the deepep backend, which Megatron-Bridge's MoE performance recipes and
  NeMo AutoModel use; torchtitan's default is its "standard" all-to-all). Hiding the all-to-all behind compute is
  the schedule's job (combined-1f1b, dualpipe), not the profile's.
- fp8_dispatch: in fp8 training, tokens are quantised to fp8 before dispatch (DeepSeek-V3 report §3.3.3); combine
  stays bf16. Only the generic profile (best published practice) assumes it.
- fp8_activation_store: in fp8 training the SwiGLU input is kept for backward in fp8 (DeepSeek-V3 report §3.3.3;
  Megatron-Core activation_func_fp8_input_store). Only the generic profile (best published practice) assumes it.
- optimizer_always_sharded: NeMo 2.0 / Megatron-Bridge recipes turn the distributed optimizer on by default
  (OptimizerConfig use_distributed_optimizer=True), so "no ZeRO" there still shards optimizer states (ZeRO-1).
- flash_attention: fused attention kernels. Megatron-LM's `--use-flash-attn` was opt-in before Transformer Engine's
  fused attention became its default; the Megatron-LM paper-era runs (Narayanan 2021, Korthikanti 2022, the Zero
  Bubble fork) used the unfused softmax path, whose s^2 activations their reported memory shows. So `megatron`
  models Megatron-LM as published in those papers; plan today's Megatron-LM with `megatron-core`.
- memory_reported: which memory figure the stack prints, so `plan validate` compares like with like (frontier_facts
  §D); a case whose log line is another stack's states its own (`measured.memory_figure`). "allocated": peak of live
  tensors, torch.cuda.max_memory_allocated (Megatron-LM report_memory "max allocated",
  training/utils/common_utils.py; DeepSpeed see_memory_usage "Max_MA"; NeMo AutoModel's benchmark "Max Memory
  Allocated", NVIDIA-NeMo/Automodel@2013a4dd6 recipes/llm/benchmark.py#L325). "reserved": the caching allocator's
  peak, torch.cuda.max_memory_reserved (torchtitan's step log `memory: X GiB` is `reserved_bytes.all.peak`, reset
  each log step but never emptied, pytorch/torchtitan@9dec370ad torchtitan/metrics.py#L55-L64; NeMo 2's
  `peak_memory_usage` under NEMO_LOG_MEMORY_USAGE, NVIDIA/NeMo@d2b21556
  nemo/lightning/pytorch/strategies/megatron_strategy.py#L680-L687, the one figure Megatron-Bridge also prints,
  mem-max-reserved-bytes beside mem-max-allocated-bytes, NVIDIA-NeMo/Megatron-Bridge@fcbb60311
  training/utils/train_utils.py#L264-L267). "device": everything on the GPU (nvidia-smi), allocator + CUDA context +
  NCCL buffers.
- loss_bytes_per_logit: bytes per logit (token x vocabulary / tp) held at the loss. Megatron's vocab-parallel
  cross-entropy keeps the bf16 logits and an fp32 softmax (6; Korthikanti §4.3). torchtitan's loss is eager
  `cross_entropy(pred.float(), labels)` (pytorch/torchtitan@9dec370ad train.py#L131-L134, the bf16 `pred` freed
  before backward, #L306-L307): at the start of backward the fp32 log-softmax output it saved, nll_loss's fp32 grad
  and log_softmax's fp32 grad are live together, 12 (newer torchtitan compiles the loss with the model,
  pytorch/torchtitan@e7c0cae components/loss.py#L25-L30: the planner does not price torch.compile).
- selective_saves: what `recompute=selective` keeps. "modules": Megatron-Core's selective recompute re-makes the
  modules memory.activation_bytes_per_token lists and keeps the rest. "alternate-mm": torchtitan's op-level
  selective checkpointing saves the outputs of every other matmul of a block (the 1st, 3rd, ...), the SDPA output
  and log-sum-exp and the SP reduce-scatters, and re-makes everything else from the block input in backward
  (pytorch/torchtitan@9dec370ad torchtitan/parallelisms/parallelize_llama.py#L214-L270; the same list at
  e7c0cae).
- fsdp_root_gathered: FSDP2 keeps the root unit's parameters gathered from forward to backward (PyTorch's
  FSDPState._lazy_init sets the root's post_forward_mesh_info to None, pytorch/pytorch@325b98f20
  torch/distributed/_composable/fsdp/_fsdp_state.py#L118-L121); torchtitan's root is the whole model, so the
  embedding, final norm and output projection stay gathered in bf16 through the loss (pytorch/torchtitan@9dec370ad
  torchtitan/parallelisms/parallelize_llama.py#L339).
- kernel_efficiency: achieved fraction of the GPU's best-case GEMM/attention rate (MAMF) in a full training step
  (launch gaps, unfused kernels, clocks under sustained load). The one fitted number per profile, so it lives in
  planner/cost/fitted.yaml with the cases it was fitted on and its score (bench/fit_profiles.py writes it);
  `profile_for` fills it in. gpt-neox and metaseq have no entry there (no published run of theirs to fit, none
  borrowed) and keep the field's default, 1.0 (MAMF itself).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from planner.cost import fitted
from planner.inputs.specs import TrainingSpec


@dataclass(frozen=True)
class FrameworkProfile:
    name: str
    grad_bytes: float = 4.0
    weight_bytes: float = 2.0
    optimizer_bytes: float = 12.0
    grad_reduce_bytes: float = 4.0
    tp_overlap: float = 0.0
    dp_overlap: float = 1.0
    deepep: bool = False
    fp8_dispatch: bool = False
    kernel_efficiency: float = 1.0  # achieved / best-case (MAMF) rate of the stack's GEMM and attention kernels
    optimizer_always_sharded: bool = False  # the stack shards optimizer states even when no ZeRO is asked for
    flash_attention: bool = True  # fused attention: no s x s scores in HBM (Dao et al. 2022)
    memory_reported: str = "allocated"  # allocated | reserved | device: the memory figure the stack logs
    loss_bytes_per_logit: float = 6.0  # bytes per token x vocabulary / tp held at the loss
    selective_saves: str = "modules"  # modules | alternate-mm: what recompute=selective keeps
    fsdp_root_gathered: bool = False  # ZeRO-3: the root unit (embedding, head) stays gathered through the loss
    # The router probability scales the experts' activation (Megatron-Core experts.py activation_func_with_probs), so
    # no h-wide tensor per routed copy is kept for its gradient; Hugging Face / DeepSpeed MoE blocks multiply the
    # expert output (and keep it), torchtitan scales the expert input (and keeps the unscaled one).
    moe_weighted_activation: bool = False
    # fp8 training keeps the SwiGLU input (fc1's gate|up output) for backward as fp8, 1 byte per value instead of 2
    # (DeepSeek-V3 report §3.3.3 caches it in FP8 and recomputes the output; Megatron-Core exposes the same as
    # activation_func_fp8_input_store, off by default and not set by the Megatron-Bridge recipes).
    fp8_activation_store: bool = False


# kernel_efficiency is left at its default below: `profile_for` fills it in from fitted.yaml.
_GENERIC = FrameworkProfile("generic", deepep=True, fp8_dispatch=True, moe_weighted_activation=True,
                            fp8_activation_store=True)
# FSDP keeps fp32 parameters (they are the master copy; bf16 copies are gathered per use) and the two Adam moments.
_FSDP = {"weight_bytes": 4.0, "optimizer_bytes": 8.0}
_STACKS: dict[str, FrameworkProfile] = {
    "generic": _GENERIC,
    "megatron": FrameworkProfile("megatron", flash_attention=False),
    # Today's Megatron-LM (Megatron-Core + Transformer Engine fused attention): NeMo's kernels without NeMo's
    # recipe defaults (TP overlap and the distributed optimizer stay opt-in). No published run here to fit it.
    "megatron-core": FrameworkProfile("megatron-core", deepep=True, moe_weighted_activation=True),
    "nemo": FrameworkProfile("nemo", tp_overlap=0.6, optimizer_always_sharded=True, deepep=True,
                             moe_weighted_activation=True, grad_bytes=2.0, grad_reduce_bytes=2.0,
                             memory_reported="reserved"),
    "megatron-deepspeed": FrameworkProfile("megatron-deepspeed", flash_attention=False, dp_overlap=0.5),
    "torchtitan": FrameworkProfile("torchtitan", memory_reported="reserved", loss_bytes_per_logit=12.0,
                                   selective_saves="alternate-mm", fsdp_root_gathered=True, **_FSDP),
    "llm-foundry": FrameworkProfile("llm-foundry", grad_reduce_bytes=2.0, **_FSDP),
    "automodel": FrameworkProfile("automodel", deepep=True, **_FSDP),
    # DeepSpeed on a PyTorch (Hugging Face) model: eager kernels like torchtitan's, whose fitted efficiency it
    # borrows in fitted.yaml (no published ds_config run to fit); overlap_comm reduces early buckets during backward
    # but leaves the last ones exposed, as in Megatron-DeepSpeed.
    "deepspeed": FrameworkProfile("deepspeed", dp_overlap=0.5),
    "gpt-neox": FrameworkProfile("gpt-neox", dp_overlap=0.5),
    "metaseq": FrameworkProfile("metaseq", **_FSDP),
    # An unnamed stack: generic kernels, but no assumption of DeepEP or fp8 dispatch.
    "other": replace(_GENERIC, deepep=False, fp8_dispatch=False, fp8_activation_store=False),
}

# The metric each `memory_reported` figure is predicted by (planner.cost.memory_terms).
MEMORY_METRIC = {"allocated": "memory_allocated_gib", "reserved": "memory_reserved_gib", "device": "memory_peak_gib"}


PROFILE_NAMES: tuple[str, ...] = tuple(_STACKS)


@lru_cache(maxsize=4)
def _fitted_profiles(values: fitted.Fitted) -> dict[str, FrameworkProfile]:
    """Every profile with its fitted kernel efficiency (cached per set of fitted values, so per `fitted.using`)."""
    return {name: replace(prof, kernel_efficiency=values.kernel_efficiency.get(name, prof.kernel_efficiency))
            for name, prof in _STACKS.items()}


def profile_for(framework: str) -> FrameworkProfile:
    """The named stack's profile with its fitted kernel efficiency; an unknown name gets the generic profile."""
    profiles = _fitted_profiles(fitted.current())
    return profiles.get(framework, profiles["generic"])


# Adam keeps two moments per parameter; bf16 moments (Megatron-Core precision-aware optimizer) hold 2 + 2 bytes
# instead of 4 + 4.
BF16_MOMENTS_SAVING = 4.0


def stack_profile(training: TrainingSpec) -> FrameworkProfile:
    """The framework's profile with the training's optimizer-state dtype applied (`optimizer_moments`)."""
    prof = profile_for(training.framework)
    if getattr(training, "optimizer_moments", "fp32") == "bf16":
        return replace(prof, optimizer_bytes=prof.optimizer_bytes - BF16_MOMENTS_SAVING)
    return prof
