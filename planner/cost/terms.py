"""Every number `planner.cost.step.evaluate` returns: what it is, its unit, the one function that computes it, and
its formula with the source. docs/architecture.md embeds `render_markdown()` between its terms markers.
tests/test_terms.py keeps the two equal, checks that this table and `evaluate` name the same keys, and checks each
row by value: while `evaluate` prices sample layouts, the function a row names returns exactly the number
evaluate returns (and `plan explain --format json` prints) for that key.

Notation: m micro-batches per step, L layers on the busiest stage, f/b forward/backward, per micro-batch unless said.
"""

from __future__ import annotations

from dataclasses import dataclass

BEGIN, END = "<!-- terms:begin -->", "<!-- terms:end -->"


@dataclass(frozen=True)
class Term:
    key: str  # key of evaluate's output
    label: str
    unit: str
    where: str  # qualified name of the function whose return value is the number
    formula: str  # one line, with its source


_C = "planner.cost."
TERMS: tuple[Term, ...] = (
    Term("step_time_s", "step time", "s", _C + "pipeline.step_time",
         "m·(t_mb + offload stalls) + bubble + exposed DP reduction + optimizer (Narayanan et al. 2021)"),
    Term("tokens_per_s_per_gpu", "throughput per GPU", "tokens/s", _C + "compute.throughput_per_gpu",
         "global batch·s / (step·GPUs)"),
    Term("mfu", "model FLOPs utilisation", "fraction", _C + "compute.mfu",
         "3·forward FLOPs (no recompute) / (step·GPUs·dense BF16 peak) (PaLM App. B; Megatron FLOP convention)"),
    Term("memory_peak_gib", "peak device memory", "GiB", _C + "memory_terms.peak_gib",
         "reserved + CUDA context + NCCL buffers per communicator: the device total the fit check uses"),
    Term("memory_reserved_gib", "peak reserved memory", "GiB", _C + "memory_terms.reserved_gib",
         "allocated + 5% caching-allocator fragmentation, as torch.cuda.max_memory_reserved (torchtitan's log)"),
    Term("memory_allocated_gib", "peak allocated memory", "GiB", _C + "memory_terms.allocated_gib",
         "max over first, second, last stage allocations, as torch.cuda.max_memory_allocated (Megatron's log)"),
    Term("num_microbatches", "micro-batches per step", "count", _C + "pipeline.microbatches",
         "global batch / (mbs·dp)"),
    Term("compute_s", "kernel time per step on the busiest rank", "s", _C + "pipeline.compute_time",
         "m·max(L·(t_f + t_b + recompute), L_last·(t_f + t_b + recompute) + 3·head forward), under DualPipe "
         "max(L·t, ((L_first + L_last)·t + 3·head forward)/2) (the rank the stage times price); t_b = 2x GEMMs, "
         "2.5x flash attention (Dao et al. 2022); each GEMM pass >= its weights (wgrad: fp32 accumulate) through HBM"),
    Term("exposed_comm_s", "exposed communication per step", "s", _C + "pipeline.exposed_comm_time",
         "m·(p2p hand-offs + L·(TP + CP + EP + ZeRO-3 exposed)) + exposed DP reduction"),
    Term("bubble_s", "pipeline bubble", "s", _C + "pipeline.bubble_time",
         "(p-1)(t_f+t_b), /v interleaved, zero-bubble and Seq1F1B variants (Narayanan 2021; Qi 2024; Sun 2024)"),
    Term("stage_fwd_s", "stage forward", "s", _C + "pipeline.stage_forward_time",
         "L·(layer forward + exposed forward comm) + head forward"),
    Term("first_stage_mb_s", "first stage micro-batch", "s",
         _C + "pipeline.first_stage_microbatch_time",
         "L·(layer f + layer b) when pp > 1 (embedding lookup negligible), else stage f + b"),
    Term("last_stage_mb_s", "last stage micro-batch", "s", _C + "pipeline.last_stage_microbatch_time",
         "stage forward + stage backward (layers + LM head and loss)"),
    Term("stage_bwd_s", "stage backward", "s", _C + "pipeline.stage_backward_time",
         "L·(layer backward + recompute + exposed backward comm) + 2·head forward"),
    Term("stage_wgrad_s", "stage weight gradients", "s", _C + "pipeline.stage_wgrad_time",
         "L·weight-gradient GEMMs + head forward (the W of zero-bubble schedules, Qi et al. 2024)"),
    Term("p2p_s", "pipeline hand-off", "s", _C + "pipeline.hand_off_time",
         "latency + activation (/tp with SP) / link bandwidth when pp > 1 (Narayanan et al. 2021 §4.1)"),
    Term("optimizer_s", "optimizer update", "s", _C + "data.optimizer_update_time",
         "30 B/param (Adam: fp32 master, 2 moments, grad, bf16 write)·params / shard / HBM + offloaded share's grads "
         "down and weights up over the host link (ZeRO-Offload); Muon: 22 B/param + L·Newton-Schulz FLOPs "
         "5·(4m²n + 2m³) of its matrices / shard at the bf16 GEMM rate (data.muon_time)"),
    Term("tp_comm_s", "exposed TP per step", "s", _C + "tensor.tp_comm_time",
         "m·L·Σ per TP block (attention, MLP) of C = all-gather/reduce-scatter(activation): forward 2C, backward 2C "
         "(+C re-gather with Megatron SP), each less what its paired GEMM G hides in the stack's mode: async "
         "backward E(C, G), ring exchange max(0, C - G(t-1)/t), pipelined GEMM+RS max(G' + C/4, G'/4 + C) - G with "
         "G' = G/(1 - SMs share); full recompute repeats the forward; a MoE layer's expert MLP exposes 2C per pass "
         "for a TP-split shared expert plus k·load passes where experts are split over expert TP (the all-to-all "
         "dispatcher gathers the routed copies; flex, one) (Narayanan 2021 §3.2; Korthikanti 2022 §4.2.2; "
         "Transformer Engine userbuffers; Megatron-Core token_dispatcher.py)"),
    Term("cp_comm_s", "exposed CP per step", "s", _C + "context.cp_comm_time",
         "m·L·((r-1)·E(KV send, attention/r) per ring pass + step launches + 2·Ulysses all-to-alls), "
         "E(T, w) = max(T - w, s·min(T, w)), s = collective SMs / SMs "
         "(Liu 2023; Jacobs 2023; Fang & Zhao 2024; Transformer Engine p2p CP)"),
    Term("ep_comm_s", "exposed EP per step", "s", _C + "expert.ep_comm_time",
         "m·L·f_moe·((1 - s)·A + s·(max(A, C/(1 - σ)) - C)), A = dispatch + combine each way (k·h per token, "
         "once per remote node with DeepEP), s = share of passes paired by combined-1f1b/DualPipe (DeepSeek-V3 §3.2)"),
    Term("fsdp_comm_s", "exposed ZeRO-3 per step", "s", _C + "sharding.fsdp_comm_time",
         "m·L·(E(gather, t_f) + E(gather + reduce-scatter, t_b)), E(T, w) = max(T - w, s·min(T, w)): what the "
         "layer does not hide, or the s = 24/SMs of the SMs NCCL holds while it runs (Rajbhandari et al. 2020)"),
    Term("nic_comm_s", "shared-link contention per step", "s", _C + "links.nic_comm_time",
         "m·L·max(0, max_t Σ_d busy_(d,t) - (t_f + t_b + recompute + exposed TP, CP, EP, ZeRO-2/3)): ZeRO-2/3, EP and "
         "CP traffic of a layer through the same network tier t, against the time the layer already takes (link "
         "roofline, Williams et al. 2009)"),
    Term("pp_comm_s", "exposed hand-offs per step", "s", _C + "pipeline.pp_comm_time",
         "m·2·p2p·v (one each way per micro-batch, v times with interleaving; hidden by DualPipe's pairing)"),
    Term("dp_comm_s", "exposed DP reduction", "s", _C + "data.reduction_exposed",
         "E(grad all-reduce (dense, expert, HSDP replicas), overlap·last backward); ZeRO-2: "
         "m·E(reduce-scatter, overlap·backward) + E(parameter all-gather, overlap·forward), E as for ZeRO-3 "
         "(DeepSpeed stage_1_and_2.py); Muon: E(fp32 all-reduce, overlap·last backward) + its parameter all-gather "
         "after the step (data.muon_gather_time)"),
    Term("recompute_s", "recomputation per step", "s", _C + "compute.recompute_step_time",
         "m·L·(full: layer forward; selective: attention core or memory-bound modules, plus torchtitan's unsaved "
         "matmuls) (Korthikanti et al. 2022)"),
    Term("offload_s", "activation offload stalls per step", "s",
         _C + "activation_offload.offload_step_time",
         "m·(max(0, k·a/B - (L-2)·t_f) + max(0, k·a/B - (L-2)·t_b) + 2·k·a/HBM), k layers' activations a over the "
         "host link B (Transformer Engine CPU offloading schedule; Megatron-Core --cpu-offloading-num-layers); "
         "offload-modules: m·L·(max(0, o/B - t_f) + max(0, o/B - t_b) + 2·o/HBM), o a layer's offloaded module "
         "inputs (activation_offload.modules_stall; Megatron-Core fine-grained activation offloading)"),
    Term("offloaded_layers", "layers offloaded to host memory", "count", _C + "activation_offload.offloaded_layers",
         "recompute=offload: fewest layers that fit capacity·(1 - headroom), 1..L-2, within host memory"),
    Term("mem_weights_gib", "weights", "GiB", _C + "memory_terms.weights_gib",
         "params·(weight bytes + 1 fp8 copy), /shard at ZeRO-3 (ZeRO §5; Transformer Engine)"),
    Term("mem_grads_gib", "gradients", "GiB", _C + "memory_terms.grads_gib",
         "params·grad bytes, /shard at ZeRO >= 2 (ZeRO §5; Megatron dist_optimizer.md)"),
    Term("mem_optimizer_gib", "optimizer states", "GiB", _C + "memory_terms.optimizer_gib",
         "params·optimizer bytes, /shard at ZeRO >= 1 (ZeRO §5)"),
    Term("mem_activations_gib", "activations", "GiB", _C + "memory_terms.activations_gib",
         "per-layer bytes/token·tokens·stage layers·in-flight micro-batches (Korthikanti et al. 2022 §4)"),
    Term("mem_logits_gib", "logits", "GiB", _C + "memory_terms.logits_gib",
         "tokens·V·(the stack's bytes per logit: 6 Megatron, 12 torchtitan's eager loss) / tp on the last stage "
         "(Korthikanti §4.3; Megatron theoretical_memory_usage.py)"),
    Term("mem_buffers_gib", "transient buffers", "GiB", _C + "memory_terms.buffers_gib",
         "ZeRO-3 gathered layers + pipeline send/recv hidden states + fp8 amax histories"),
    Term("mem_fragmentation_gib", "allocator fragmentation", "GiB", _C + "memory_terms.fragmentation_gib",
         "5% of allocated: reserved - allocated (Megatron theoretical_memory_usage.py)"),
    Term("mem_context_gib", "CUDA context", "GiB", _C + "memory_terms.context_gib",
         "1 GiB of context and kernels outside the allocator (ml-engineering; Ultra-Scale Playbook)"),
    Term("mem_nccl_gib", "NCCL buffers", "GiB", _C + "memory_terms.nccl_gib",
         "per communicator 2 connections·32 channels·9.2 MiB protocol buffers (nccl device.h; nccl #964)"),
    Term("mem_reserve_gib", "runtime reserve", "GiB", _C + "memory_terms.reserve_gib",
         "fragmentation + CUDA context + NCCL buffers + transient buffers"),
    Term("mem_first_stage_gib", "first stage memory", "GiB", _C + "memory_terms.first_stage_gib",
         "(states + activations + (logits if pp = 1) + buffers)·1.05 + context + NCCL"),
    Term("mem_last_stage_gib", "last stage memory", "GiB", _C + "memory_terms.last_stage_gib",
         "(states + activations + logits + buffers)·1.05 + context + NCCL"),
)
KEYS: tuple[str, ...] = tuple(t.key for t in TERMS)


def render_markdown() -> str:
    """The table as Markdown: number | label | unit | formula | where."""
    lines = ["| number | label | unit | formula | where |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| `{t.key}` | {t.label} | {t.unit} | {t.formula} | `{t.where}` |" for t in TERMS]
    return "\n".join(lines)


def splice(document: str) -> str:
    """`document` with the block between the terms markers replaced by the rendered table."""
    head, rest = document.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{render_markdown()}\n{END}{tail}"


def embedded(document: str) -> str:
    """The block between the terms markers of `document`, without the surrounding newlines."""
    return document.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")
