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
- tp_comm_base / tp_comm_method / tp_comm_overlap: how the stack overlaps tensor-parallel collectives with GEMMs
  (planner.cost.tensor TP_MODES, which says what each mode hides): its mode without the switch, the mode its switch
  turns on (None: no switch), and whether its recipes turn it on. Megatron-Core / Transformer Engine run the
  backward's collectives beside the GEMMs that do not need them ("backward"); `--tp-comm-overlap` (off by default,
  Megatron-LM arguments.py store_true) turns on TE userbuffers. NeMo's and Megatron-Bridge's Llama 3 performance
  recipes turn it on with a tuned userbuffers config (NVIDIA/NeMo nemo/collections/llm/recipes/llama3_70b.py
  pretrain_recipe_performance: MegatronCommOverlapCallback(tp_comm_overlap=True,
  tp_comm_overlap_cfg=userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192); Megatron-Bridge perf_recipes
  llama/h100/llama3.py, frontier_facts §G). torchtitan's async TP is opt-in (`enable_async_tensor_parallel` false by
  default, job_config). DeepSpeed's AutoTP, GPT-NeoX, metaseq and Megatron-DeepSpeed block on every TP collective;
  the paper-era Megatron-LM overlaps only SP's backward collectives (Korthikanti et al. 2022 §4.2.2).
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
  pytorch/torchtitan@e7c0cae components/loss.py#L25-L30: memory.COMPILED_LOSS_BYTES where the run compiles it).
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
- moe_router_fusion: the MoE router runs as Transformer Engine's fused kernels (Megatron-Core --moe-router-fusion):
  fewer host-side ops per MoE layer (planner.cost.host). Off in Megatron-Core's TransformerConfig and in
  Megatron-Bridge's MoE recipes (recipes/qwen/qwen3_moe.py, gpt_oss/gpt_oss.py, deepseek/deepseek_v3.py set
  moe_router_fusion = False); on in the generic profile, as Megatron-Core's MoE README lists it among the flags
  that "help to achieve higher performance on almost all workloads", and in the nemo profile, as Megatron-Bridge's
  performance scripts turn it on for every MoE model of their tables (scripts/performance/configs: e.g.
  NVIDIA-NeMo/Megatron-Bridge@fcbb60311 qwen/qwen3_llm_pretrain.py#L37, deepseek/deepseek_llm_pretrain.py#L39,
  gpt_oss/gpt_oss_llm_pretrain.py#L35). A run that says (TrainingSpec.moe_router_fusion) overrides the profile
  (planner.cost.host.router_fused).
- compile_speedup / compiles_by_default: stacks that run PyTorch's own kernels run faster compiled (torch.compile
  fuses the elementwise ops between GEMMs and cuts launches). compile_speedup is the step rate compiled over eager of
  the same layout, and the fitted kernel_efficiency of such a stack is its compiled one (eager = / compile_speedup).
  torchtitan published the pairs (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Llama 3.1 8B,
  FSDP, selective AC: Table 1 on 8 H100 5,762 -> 6,667 tokens/s/GPU, Table 3 on 128 H100 5,605 -> 6,514; 1.157 and
  1.162): COMPILE_SPEEDUP, their mean. DeepSpeed on a Hugging Face model runs the same eager PyTorch kernels and
  compiles with the Trainer's --torch_compile. torchtitan compiles by default here: every published torchtitan
  throughput row but the eager FSDP baselines compiles (its train_configs ship `[compile] enable = false`, which
  the planner's TOML overrides); the Trainer's torch_compile defaults to False (transformers TrainingArguments).
  Megatron-based stacks run Transformer Engine's fused kernels: 1.0, no switch.
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
from planner.inputs.specs import ModelSpec, TrainingSpec


@dataclass(frozen=True)
class FrameworkProfile:
    name: str
    grad_bytes: float = 4.0
    weight_bytes: float = 2.0
    optimizer_bytes: float = 12.0
    grad_reduce_bytes: float = 4.0
    tp_comm_base: str = "backward"  # TP overlap mode without the switch (planner.cost.tensor TP_MODES)
    tp_comm_method: str | None = "userbuffers"  # the mode its tp_comm_overlap switch runs; None: no switch
    tp_comm_overlap: bool = False  # the switch as the stack's recipes ship it
    dp_overlap: float = 1.0
    # a sharded optimizer's parameter all-gather hides behind the next forward (overlap_param_gather); Muon's
    # layer-wise optimizer gathers after the step instead (data.muon_gather_time)
    param_gather_overlap: bool = True
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
    moe_router_fusion: bool = False  # fused router kernels: fewer host ops per MoE layer (planner.cost.host)
    # One grouped-GEMM kernel, issued by one eager op, runs each expert matrix for all local experts
    # (torch._grouped_mm: torchtitan's GroupedExperts; grouped_gemm's ops.gmm: AutoModel's GroupedExpertsDeepEP, the
    # experts it builds with DeepEP, NVIDIA-NeMo/Automodel@89e3a9fdd nemo_automodel/components/moe/layers.py L478-L492),
    # instead of Transformer Engine's GroupedLinear, which splits its input and launches one GEMM per local expert
    # (planner.cost.host, expert.moe_launch_time). AutoModel without DeepEP loops over its experts in Python (same
    # file, GroupedExperts.forward), which this flag does not describe.
    grouped_expert_gemm: bool = False
    # ZeRO-3 parameter partitions live in host memory (DeepSpeed offload_param; set from the training's
    # param_offload by stack_profile): no persistent weights on the GPU, each layer's partition copied in per gather
    params_in_host: bool = False
    compile_speedup: float = 1.0  # step rate compiled / eager (1.0: no torch.compile switch)
    compiles_by_default: bool = False  # torch.compile on unless the training says otherwise
    # Attention with learnable sinks (gpt-oss) in bf16 computes every score tile (`sink_attention_all_tiles`).
    sink_attention_all_tiles: bool = False
    # Data parallelism is FSDP (sharded weights and gradients) in the stack's own recipes, not a distributed
    # optimizer beside replicated weights: sharding a MoE model's experts is its standard practice
    # (planner.cost.bands.SHARDED_EXPERTS).
    fsdp_native: bool = False


COMPILE_SPEEDUP = (6667 / 5762 + 6514 / 5605) / 2  # torchtitan's eager -> compiled pairs (module docstring)

# kernel_efficiency is left at its default below: `profile_for` fills it in from fitted.yaml.
_GENERIC = FrameworkProfile("generic", deepep=True, fp8_dispatch=True, moe_weighted_activation=True,
                            fp8_activation_store=True, moe_router_fusion=True, tp_comm_overlap=True)
# Stacks whose TP collectives all block, with no switch to overlap them.
_TP_BLOCKING = {"tp_comm_base": "none", "tp_comm_method": None}
# FSDP keeps fp32 parameters (they are the master copy; bf16 copies are gathered per use) and the two Adam moments.
_FSDP = {"weight_bytes": 4.0, "optimizer_bytes": 8.0, "fsdp_native": True}
_STACKS: dict[str, FrameworkProfile] = {
    "generic": _GENERIC,
    "megatron": FrameworkProfile("megatron", flash_attention=False, tp_comm_base="sp-backward", tp_comm_method=None),
    # Today's Megatron-LM (Megatron-Core + Transformer Engine fused attention): NeMo's kernels without NeMo's
    # recipe defaults (TP overlap and the distributed optimizer stay opt-in). No published run here to fit it.
    "megatron-core": FrameworkProfile("megatron-core", deepep=True, moe_weighted_activation=True,
                                      sink_attention_all_tiles=True),
    # NeMo / Megatron-Bridge as NVIDIA's performance scripts run it: the fused MoE router on (module docstring).
    "nemo": FrameworkProfile("nemo", tp_comm_overlap=True, optimizer_always_sharded=True, deepep=True,
                             moe_router_fusion=True,
                             moe_weighted_activation=True, grad_bytes=2.0, grad_reduce_bytes=2.0,
                             memory_reported="reserved", sink_attention_all_tiles=True),
    "megatron-deepspeed": FrameworkProfile("megatron-deepspeed", flash_attention=False, dp_overlap=0.5,
                                           **_TP_BLOCKING),
    "torchtitan": FrameworkProfile("torchtitan", memory_reported="reserved", loss_bytes_per_logit=12.0,
                                   selective_saves="alternate-mm", fsdp_root_gathered=True, tp_comm_base="none",
                                   tp_comm_method="async-tp", compile_speedup=COMPILE_SPEEDUP,
                                   compiles_by_default=True, grouped_expert_gemm=True, **_FSDP),
    "llm-foundry": FrameworkProfile("llm-foundry", grad_reduce_bytes=2.0, **_FSDP, **_TP_BLOCKING),
    "automodel": FrameworkProfile("automodel", deepep=True, grouped_expert_gemm=True, **_FSDP, **_TP_BLOCKING),
    # DeepSpeed on a PyTorch (Hugging Face) model: eager kernels like torchtitan's, whose fitted efficiency it
    # borrows in fitted.yaml (no published ds_config run to fit); overlap_comm reduces early buckets during backward
    # but leaves the last ones exposed, as in Megatron-DeepSpeed.
    "deepspeed": FrameworkProfile("deepspeed", dp_overlap=0.5, compile_speedup=COMPILE_SPEEDUP, **_TP_BLOCKING),
    "gpt-neox": FrameworkProfile("gpt-neox", dp_overlap=0.5, **_TP_BLOCKING),
    "metaseq": FrameworkProfile("metaseq", **_FSDP, **_TP_BLOCKING),
    # An unnamed stack: generic kernels, but no assumption of DeepEP or fp8 dispatch.
    "other": replace(_GENERIC, deepep=False, fp8_dispatch=False, fp8_activation_store=False, moe_router_fusion=False),
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


def fused_attention(training: TrainingSpec) -> bool:
    """Whether the attention core runs fused (no s x s scores in HBM): the stack's kernels, unless the run fell back
    to the unfused path (TrainingSpec.attention_kernel)."""
    return profile_for(training.framework).flash_attention and training.attention_kernel != "unfused"


def sink_attention_all_tiles(training: TrainingSpec, model: ModelSpec) -> bool:
    """Whether the model's attention sinks make its fused attention compute every score tile
    (planner.cost.attention_rate.all_tiles_factor): a model with learnable sinks, in bf16 attention, on a stack whose
    profile says so (`sink_attention_all_tiles`).

    Transformer Engine runs learnable-softmax attention (softmax_type "learnable") only through cuDNN, whose
    composite SDPA graph carries the sink as pointwise and reduction nodes beside the causal and sliding-window
    masks (NVIDIA/cudnn-frontend node/softmax.h, sdpa_support_surface.h: the unified engine takes sinks only from
    cuDNN 9.21). That its kernel then skips no masked tile is inferred, not read: it is the one assumption that
    reproduces Megatron-Bridge's controlled CUDA-graph pair of gpt-oss-20b on H100 (planner.evidence.anchors
    BRIDGE_GRAPH_PAIR: the graphs' measured gain 1.25x, 1.26x priced so, 1.44x without) while the host-bound gpt-oss
    rows keep their price, and it brings every published gpt-oss row priced 29-54 % fast to within about 20 %
    (bench/gpt_oss_gap.py, docs/accuracy.md). Megatron-Core and NeMo run Transformer Engine's attention; fp8
    attention (TrainingSpec.attention_kernel "fp8": Transformer Engine 2.15 on Blackwell with cuDNN 9.21 runs it on
    the unified engine) skips them, as the one preset that ran it shows (validation case MB-044); torchtitan runs
    gpt-oss's sinks through FlexAttention, whose block masks skip the masked tiles."""
    return (model.attention_sinks and training.attention_kernel == "stack" and fused_attention(training)
            and profile_for(training.framework).sink_attention_all_tiles)


# Adam keeps two moments per parameter; bf16 moments (Megatron-Core precision-aware optimizer) hold 2 + 2 bytes
# instead of 4 + 4.
BF16_MOMENTS_SAVING = 4.0
# Muon keeps an fp32 master copy and one fp32 momentum buffer per parameter (Megatron-Core muon.py
# muon_init_state_fn: momentum_buffer), and Megatron-Bridge's Muon recipes keep and all-reduce gradients in fp32
# (recipes/kimi/h100/kimi_k2.py _apply_kimi_k2_optimizer: grad_reduce_in_fp32 = True, no distributed optimizer).
MUON_STATE_BYTES = 8.0
MUON_GRAD_BYTES = 4.0


def stack_profile(training: TrainingSpec) -> FrameworkProfile:
    """The framework's profile with the training's optimizer (Muon's states and fp32 gradients, `optimizer`) and
    optimizer-state dtype (`optimizer_moments`), parameter offload
    (`param_offload`) and TP overlap switch (`tp_comm_overlap`, None: as the stack's recipes ship it) applied."""
    prof = profile_for(training.framework)
    if getattr(training, "optimizer_moments", "fp32") == "bf16":
        prof = replace(prof, optimizer_bytes=prof.optimizer_bytes - BF16_MOMENTS_SAVING)
    if getattr(training, "optimizer", "adam") == "muon":
        prof = replace(prof, optimizer_bytes=MUON_STATE_BYTES, grad_bytes=MUON_GRAD_BYTES,
                       grad_reduce_bytes=MUON_GRAD_BYTES, param_gather_overlap=False)
    if getattr(training, "param_offload", False):
        prof = replace(prof, params_in_host=True)
    overlap = getattr(training, "tp_comm_overlap", None)
    if overlap is not None and overlap != prof.tp_comm_overlap:
        prof = replace(prof, tp_comm_overlap=bool(overlap))
    return prof


def compiled(prof: FrameworkProfile, training: TrainingSpec) -> bool:
    """Whether the run compiles its model: the training's `torch_compile`, else the stack's default; never where
    the stack has no switch for it."""
    flag = getattr(training, "torch_compile", None)
    return prof.compile_speedup > 1.0 and (prof.compiles_by_default if flag is None else bool(flag))


def plan_compiles_loss(training: TrainingSpec) -> bool:
    """Whether a plan's run compiles its loss: where it compiles at all, the loss goes with the model (the torchtitan
    TOML the planner writes lists both compile components; a Hugging Face model computes its loss in the forward the
    Trainer compiles). Validation cases say so per run instead (Problem.compiled_loss from the knob's scope)."""
    return compiled(profile_for(training.framework), training)


def kernel_efficiency(training: TrainingSpec) -> float:
    """The stack's achieved kernel rate for this training: its fitted (compiled, where it can compile) efficiency,
    / compile_speedup when it runs eager."""
    prof = profile_for(training.framework)
    eager = prof.compile_speedup > 1.0 and not compiled(prof, training)
    return prof.kernel_efficiency / prof.compile_speedup if eager else prof.kernel_efficiency


def tp_mode(prof: FrameworkProfile) -> str:
    """The TP overlap mode the profile runs (planner.cost.tensor TP_MODES): its switch's mode when on, else its
    base."""
    return prof.tp_comm_method if (prof.tp_comm_overlap and prof.tp_comm_method) else prof.tp_comm_base
