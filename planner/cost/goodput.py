"""Goodput: the share of wall-clock time a run spends on steps it keeps, once failures, checkpoints and restarts are
counted. A synchronous job stops whole at any GPU's failure, goes back to its last checkpoint and loses the work
since; it pays for every checkpoint it writes and for every restart. Time-to-train is the step time's figure divided
by goodput.

The model, for a job of N GPUs (all times in seconds):
- MTBF of the job M = 3600 / (r x N), r = failures per GPU-hour. The rate per GPU is taken as constant with scale,
  so the job's MTBF falls as 1/N (Kokolis et al. 2024, "Revisiting Reliability in Large-Scale Machine Learning
  Research Clusters", arXiv 2410.21680: job MTTF projected from a per-node failure rate).
- Checkpoint bytes per GPU b: the run's unique state (weights + optimizer states, the bytes per parameter of the
  memory model's framework profile) over N GPUs: Megatron-LM's distributed checkpoint (fully parallel save) and
  PyTorch DCP write each replicated tensor once, spread over its replicas, so a GPU writes its share whatever the
  layout.
- Write time w = b / min(per-GPU storage link, aggregate write bandwidth / N); the restore reads b back the same way.
- Stall per checkpoint delta: w for a synchronous save; for an asynchronous one the copy to host memory, b / host
  link, while the write finishes in the background (then a failure during the write also loses the segment before,
  ~w more work per failure, and the next save cannot start before the write ends).
- Restart R = re-launch (noticing the failure, new node, NCCL and data loaders) + restore.
- Interval tau between checkpoints: Daly's higher-order optimum (Daly 2006, "A higher order estimate of the optimum
  checkpoint interval for restart dumps", FGCS 22(3)), sqrt(2 delta M) [1 + sqrt(delta / 2M) / 3 +
  delta / 18M] - delta for delta < 2M, else M; to first order Young's sqrt(2 delta M) (Young 1974, CACM 17(9)).
  Rounded to whole steps (a save happens between steps: Megatron-LM --save-interval counts iterations).
- Goodput G = tau / (M e^(R/M) (e^((tau + delta)/M) - 1)) x e^(-w_async/M): Daly's expected wall time for
  exponentially distributed failures (failures may strike during checkpoints and restarts too), the
  asynchronous write's exposure on top. Its factors split the loss into restart, checkpoint stalls and lost work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.cost.flops import total_params
from planner.cost.profiles import stack_profile
from planner.inputs.problem import Problem

GB = 1e9
# --- defaults for what a cluster file leaves out (planner.inputs.resilience) ----------------------------------------
# Llama 3 405B on 16,384 H100 over a 54-day snapshot: 466 job interruptions, 419 of them unexpected (Dubey et al.
# 2024, "The Llama 3 Herd of Models", section 3.3.4, Table 5). The 47 planned ones are taken after a checkpoint and
# lose no work, so the unexpected ones set the rate: 419 / (16,384 x 54 x 24 GPU-hours) = 1.97e-5 per GPU-hour,
# one interruption every 3.1 hours for that job. It is the only published per-run count at this scale; the same
# figure stands for every GPU generation.
LLAMA3_GPUS = 16_384
LLAMA3_UNEXPECTED = 419
LLAMA3_HOURS = 54 * 24
FAILURES_PER_GPU_HOUR = LLAMA3_UNEXPECTED / (LLAMA3_GPUS * LLAMA3_HOURS)
# Re-launch after an interruption, before the checkpoint is read: 10 minutes. It is the collective timeout of
# Megatron-LM (--distributed-timeout-minutes, default 10, megatron/training/arguments.py) and of PyTorch's NCCL
# process groups (init_process_group's default timeout), the time a job with stock settings needs to notice a
# failure that leaves its peers waiting in a collective; starting a job on ~100k GPUs takes minutes as well (stock
# NCCL initialisation alone ~265 s on 96k GPUs, 11x less with NCCLX: Si et al. 2025, "Collective Communication for
# 100k+ GPUs", arXiv 2510.20171). The Llama 3 report names job start-up among what it shortened, without a figure;
# a cluster file's reliability.restart_s replaces it.
RESTART_S = 600.0
# Llama 3's checkpoint storage: Tectonic, 2 TB/s sustained and 7 TB/s peak (Llama 3 report, section 3.3.1), for a
# 16,384-GPU job: 2000 / 16,384 = 0.122 GB/s per GPU. A job without a storage section gets that share per GPU
# (storage grown with the cluster), for writes and reads alike (the sustained figure: a restore is every GPU reading
# at once).
STORAGE_GBPS_PER_GPU = 2000.0 / LLAMA3_GPUS
# A GPU's own path to storage: a DGX H100 has two dual-port ConnectX-7 (400 Gb/s) for storage and in-band
# management beside its eight compute NICs (NVIDIA DGX H100 datasheet); two 400 Gb/s ports over 8 GPUs = 12.5 GB/s.
STORAGE_LINK_GBPS_PER_GPU = 2 * 400 / 8 / 8


@dataclass(frozen=True)
class Storage:
    """The figures a checkpoint is priced with, defaults filled in."""

    write_gbps: float  # aggregate
    read_gbps: float  # aggregate
    per_gpu_gbps: float
    async_save: bool


@dataclass(frozen=True)
class Goodput:
    """What failures, checkpoints and restarts cost one layout; every time in seconds."""

    goodput: float  # useful time / wall time
    failures_per_gpu_hour: float
    mtbf_s: float  # the job's mean time between interruptions
    checkpoint_gb: float  # bytes each GPU writes per checkpoint, GB
    write_s: float  # one checkpoint reaching storage
    stall_s: float  # training paused per checkpoint
    async_save: bool
    interval_steps: int
    interval_s: float  # training time between checkpoints (whole steps)
    relaunch_s: float
    restore_s: float
    restart_s: float  # relaunch + restore
    lost_work_s: float  # expected work redone per interruption
    loss: dict[str, float]  # share of wall time lost to "restart", "checkpoints", "lost_work" (sums to 1 - goodput)

    def as_dict(self) -> dict[str, float | int | bool | dict[str, float]]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def storage(problem: Problem) -> Storage:
    """The cluster's storage section with every default filled in."""
    st, n = problem.cluster.storage, problem.num_gpus
    write = st.write_gbps if st.write_gbps is not None else STORAGE_GBPS_PER_GPU * n
    read = st.read_gbps if st.read_gbps is not None else write
    link = st.per_gpu_gbps if st.per_gpu_gbps is not None else STORAGE_LINK_GBPS_PER_GPU
    return Storage(write, read, link, st.async_save)


def failures_per_gpu_hour(problem: Problem) -> float:
    rate = problem.cluster.reliability.failures_per_gpu_hour
    return FAILURES_PER_GPU_HOUR if rate is None else rate


def relaunch_s(problem: Problem) -> float:
    given = problem.cluster.reliability.restart_s
    return RESTART_S if given is None else given


def mtbf_s(rate_per_gpu_hour: float, gpus: int) -> float:
    """The job's mean time between interruptions: any GPU's failure stops it (inf when nothing fails)."""
    return math.inf if rate_per_gpu_hour <= 0 else 3600.0 / (rate_per_gpu_hour * gpus)


def checkpoint_bytes_per_gpu(problem: Problem) -> float:
    """Each GPU's share of the run's unique state: weights and optimizer states at the memory model's bytes per
    parameter (the framework profile, Adam moments' dtype applied), spread over every GPU."""
    prof = stack_profile(problem.training)
    return total_params(problem.model) * (prof.weight_bytes + prof.optimizer_bytes) / problem.num_gpus


def transfer_s(nbytes: float, per_gpu_gbps: float, aggregate_gbps: float, gpus: int) -> float:
    """Every GPU moving `nbytes` at once: its own link or its share of the aggregate, whichever is smaller."""
    return nbytes / (min(per_gpu_gbps, aggregate_gbps / gpus) * GB)


def daly_interval_s(stall_s: float, mtbf: float) -> float:
    """Daly's higher-order optimum compute time between checkpoints (Young's sqrt(2 delta M) to first order)."""
    if stall_s >= 2 * mtbf:
        return mtbf
    ratio = stall_s / (2 * mtbf)
    return math.sqrt(2 * stall_s * mtbf) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - stall_s


def daly_factors(interval_s: float, stall_s: float, restart_s: float, exposure_s: float,
                 mtbf: float) -> dict[str, float]:
    """Goodput as a product of factors (Daly's expected wall time, exponential failures): restart e^(-R/M),
    checkpoint stalls tau / (tau + delta), lost work x / (e^x - 1) with x = (tau + delta) / M, times e^(-w/M)
    for an asynchronous write in flight."""
    x = (interval_s + stall_s) / mtbf
    redo = x / math.expm1(x) if x > 0 else 1.0
    return {"restart": math.exp(-restart_s / mtbf), "checkpoints": interval_s / (interval_s + stall_s),
            "lost_work": redo * math.exp(-exposure_s / mtbf)}


def loss_shares(factors: dict[str, float]) -> dict[str, float]:
    """Split 1 - product(factors) over the factors in proportion to their logarithms (exact sum)."""
    total = math.prod(factors.values())
    logs = {k: -math.log(v) if v > 0 else math.inf for k, v in factors.items()}
    whole = sum(logs.values())
    if whole == 0:
        return {k: 0.0 for k in factors}
    if not math.isfinite(whole):
        return {k: (1.0 if math.isinf(v) else 0.0) for k, v in logs.items()}
    return {k: (1 - total) * v / whole for k, v in logs.items()}


def goodput(problem: Problem, step_time_s: float) -> Goodput:
    """Expected goodput of a run whose steps take `step_time_s` on `problem`'s cluster."""
    n, st = problem.num_gpus, storage(problem)
    rate = failures_per_gpu_hour(problem)
    mtbf = mtbf_s(rate, n)
    nbytes = checkpoint_bytes_per_gpu(problem)
    write = transfer_s(nbytes, st.per_gpu_gbps, st.write_gbps, n)
    restore = transfer_s(nbytes, st.per_gpu_gbps, st.read_gbps, n)
    stall = nbytes / (problem.cluster.gpu.host_link_gbps * GB) if st.async_save else write
    relaunch = relaunch_s(problem)
    if not math.isfinite(mtbf):  # nothing fails: no checkpoint is needed for failures, nothing is lost
        return Goodput(1.0, rate, mtbf, nbytes / GB, write, stall, st.async_save, 0, math.inf, relaunch, restore,
                       relaunch + restore, 0.0, {"restart": 0.0, "checkpoints": 0.0, "lost_work": 0.0})
    steps = max(1, round(daly_interval_s(stall, mtbf) / step_time_s))
    if st.async_save:  # the next save waits for the last write to land
        steps = max(steps, math.ceil(write / step_time_s))
    interval = steps * step_time_s
    exposure = write if st.async_save else 0.0
    factors = daly_factors(interval, stall, relaunch + restore, exposure, mtbf)
    lost = (interval + stall) / 2 + exposure
    return Goodput(math.prod(factors.values()), rate, mtbf, nbytes / GB, write, stall, st.async_save, steps,
                   interval, relaunch, restore, relaunch + restore, lost, loss_shares(factors))
