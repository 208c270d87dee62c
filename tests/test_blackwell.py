"""Rack-scale Blackwell (issue 12 item 5): NVL72 job domains, Blackwell Ultra GEMM rates, NVFP4 and the BF16 LM head,
each checked against a number worked by hand from the sources named in clusters/gpus.yaml and
planner/inputs/hardware.py."""

import numpy as np
import pytest

from planner.cost import compute, fabric
from planner.cost.sharding import fsdp_exposed
from planner.inputs.catalog import gpu_catalog, job_nvlink_domain, load_cluster, load_model
from planner.inputs.hardware import FP4_OVER_FP8_KERNEL_RATE, FP8_CAST_BYTES, NVFP4_CAST_BYTES
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec

R_4_8 = 7.161 / 3.764  # NVFP4 over MXFP8 kernel rate, TE GEMM profiling tutorial (B300, pre-quantised)


def _problem(model: str, cluster: str, precision: str, framework: str = "nemo") -> Problem:
    return Problem(load_model(model), load_cluster(cluster),
                   TrainingSpec(seq_len=8192, global_batch=256, precision=precision, framework=framework))


# ------------------------------------------------------------------------------------------------ NVL72 job domain

@pytest.mark.parametrize(("count", "domain"), [(8, 8), (64, 64), (72, 72), (128, 64), (256, 64), (512, 64)])
def test_jobs_larger_than_an_nvl72_rack_get_64_gpu_segments(count: int, domain: int):
    """A job inside one rack gets all its GPUs; larger ones are placed in 16-tray (64-GPU) segments."""
    assert load_cluster(f"gb200x{count}").nvlink_domain == domain
    assert load_cluster(f"gb300x{count}").nvlink_domain == domain


def test_hgx_boards_keep_their_8_gpu_domain():
    assert job_nvlink_domain(8, 1024) == 8 and load_cluster("b300x256").nvlink_domain == 8


def test_an_ep128_all_to_all_on_gb200_sends_half_its_bytes_over_the_network():
    """EP 128 (stride 1) on 256 GB200s: 64 peers share a segment, so of S bytes a rank sends S·63/128 over NVLink
    (900 GB/s x 0.80) and S·64/128 over its 400 Gb/s NIC (50 GB/s x 0.92); the NIC share sets the time. With the
    rack's 72 as the domain, 128 ranks would have looked like one domain plus a remainder (k = 128 // 72 = 1)."""
    c = load_cluster("gb200x256")
    s = 1e9
    t = fabric.all_to_all_time(np.array([s]), np.array([128]), np.array([1]), c)[0]
    nic = s * 64 / 128 / (50e9 * 0.92)
    nvl = s * 63 / 128 / (900e9 * 0.80)
    latency = fabric.BASE_LATENCY_S + 2 * np.log2(64) * fabric.NVLINK_HOP_S + 2 * np.log2(2) * fabric.NETWORK_HOP_S
    assert nic > nvl
    assert t == pytest.approx(nic + latency, rel=1e-9)


def test_b300_pays_the_network_for_ep64_that_gb300_keeps_on_nvlink():
    """Same GPU generation, 64 GPUs, EP 64: HGX B300 (8-GPU NVLink) sends 56/64 of the bytes over its 800 Gb/s NIC,
    GB300 NVL72 sends all 63/64 over NVLink: S·56/64 / (100 GB/s x 0.92) vs S·63/64 / (900 GB/s x 0.80)."""
    s = 1e9
    args = (np.array([s]), np.array([64]), np.array([1]))
    b300 = fabric.all_to_all_time(*args, load_cluster("b300x64"))[0]
    gb300 = fabric.all_to_all_time(*args, load_cluster("gb300x64"))[0]
    assert b300 == pytest.approx(s * 56 / 64 / (100e9 * 0.92), rel=0.01)
    assert gb300 == pytest.approx(s * 63 / 64 / (900e9 * 0.80), rel=0.05)
    assert b300 / gb300 > 6


# --------------------------------------------------------------------------------------------- Blackwell Ultra rates

@pytest.mark.parametrize(("ultra", "base"), [("b300", "b200"), ("gb300", "gb200")])
def test_blackwell_ultra_has_the_same_dense_peaks_and_its_extra_sms_in_the_gemm_rate(ultra: str, base: str):
    """Datasheets: B300 = B200 and GB300 = GB200 in dense BF16 and FP8; NVFP4 1.5x (13.5 vs 9, 15 vs 10 PF). The
    achievable GEMM rate is the base part's MAMF x 160/148 SMs (clusters/gpus.yaml [ULTRA])."""
    cat = gpu_catalog()
    u, b = cat[ultra], cat[base]
    assert (u["bf16_tflops"], u["fp8_tflops"]) == (b["bf16_tflops"], b["fp8_tflops"])
    assert u["fp4_tflops"] == pytest.approx(1.5 * b["fp4_tflops"])
    assert (u["sm_count"], b["sm_count"]) == (160, 148)
    for key in ("matmul_efficiency", "fp8_matmul_efficiency"):
        assert u[key] == pytest.approx(b[key] * 160 / 148, abs=0.0006)


@pytest.mark.parametrize(("ultra", "base"), [("b300", "b200"), ("gb300", "gb200")])
def test_blackwell_ultra_attention_gains_the_measured_softmax_speedup(ultra: str, base: str):
    """Blackwell Ultra doubles the exponential units FA4 finds B200's attention bound by; NVIDIA measured the
    attention forward ~35 % faster on GB300 than GB200 (clusters/gpus.yaml [SFU]): more than the 8 % its extra SMs
    alone would give, and the GEMM rate does not gain it."""
    cat = gpu_catalog()
    u, b = cat[ultra], cat[base]
    assert u["attention_efficiency"] == pytest.approx(1.35 * b["attention_efficiency"], abs=0.001)
    assert u["attention_efficiency"] / b["attention_efficiency"] > 1.2 * u["matmul_efficiency"] / b["matmul_efficiency"]


# ------------------------------------------------------------------------------------------------------- NVFP4

def test_nvfp4_gemms_run_at_1_9x_the_fp8_kernel_rate_on_b300():
    """TE GEMM profiling tutorial (B300, kernels only): MXFP8 7.161 ms, NVFP4 3.764 ms per layer -> 1.90x. B300's
    FP4 peak is 3x its FP8 peak, so the FP4 efficiency is the FP8 one x 1.90 / 3 = 0.825 x 0.634 = 0.523."""
    gpu = load_cluster("b300x8").gpu
    assert FP4_OVER_FP8_KERNEL_RATE == pytest.approx(R_4_8) == pytest.approx(1.9025, abs=1e-4)
    eff4 = compute.gemm_efficiency(gpu, "fp4")
    assert eff4 == pytest.approx(0.825 * R_4_8 * 4500 / 13500, rel=1e-6)
    assert 13500 * eff4 / (4500 * compute.gemm_efficiency(gpu, "fp8")) == pytest.approx(R_4_8, rel=1e-6)


def test_non_ultra_fp4_peak_is_only_2x_fp8_so_the_cap_barely_binds():
    """GB200: FP4 10 PF = 2x FP8 5 PF; capped at 1.90x the FP8 rate: efficiency 0.723 x 1.9025 / 2 = 0.688."""
    gpu = load_cluster("gb200x8").gpu
    assert compute.gemm_efficiency(gpu, "fp4") == pytest.approx(0.723 * R_4_8 / 2, rel=1e-6)


def test_a_gpu_without_an_fp4_peak_runs_fp4_recipes_at_its_fp8_rate():
    gpu = load_cluster("h100x8").gpu
    assert gpu.peak_tflops("fp4") == 1979
    assert compute.gemm_efficiency(gpu, "fp4") == compute.gemm_efficiency(gpu, "fp8") == 0.709


def test_nvfp4_quantisation_moves_1_475x_the_fp8_cast_bytes():
    """Autocast minus pre-quantised (same tutorial): MXFP8 1.823 ms, NVFP4 2.689 ms of quantisation per layer, so
    4 B x 2.689 / 1.823 = 5.90 B per operand element; the layer's memory-bound forward grows by that much more."""
    assert NVFP4_CAST_BYTES == pytest.approx(4.0 * 2.689 / 1.823) == pytest.approx(5.900, abs=1e-3)
    p4, p8 = _problem("llama3-70b", "gb300x64", "fp4"), _problem("llama3-70b", "gb300x64", "fp8")
    tok, tp, sp = np.array([8192.0]), np.array([1.0]), np.array([0])
    e4, _ = compute.elementwise_bytes(p4, tok, tp, sp)
    e8, _ = compute.elementwise_bytes(p8, tok, tp, sp)
    w_in, _ = compute.linear_io_widths(p4.model)
    # Llama 3 70B: h 8192, q 8192, o 8192 in, FFN 28672 -> 53,248 input elements per token
    assert w_in == 8192 * 3 + 28672
    assert e4[0] - e8[0] == pytest.approx(8192 * (NVFP4_CAST_BYTES - FP8_CAST_BYTES) * w_in, rel=1e-9)


def test_fp4_gemm_time_on_gb200_is_the_fp8_one_over_1_9():
    """The layer GEMMs of an fp4 run take 1 / 1.9025 of the fp8 run's on GB200 (same kernels' efficiency base)."""
    p4, p8 = _problem("llama3-70b", "gb200x64", "fp4"), _problem("llama3-70b", "gb200x64", "fp8")
    args = (np.array([8192.0]), np.array([2.0]), np.array([1.0]))
    g4 = compute.gemm_time(p4, compute.rates(p4), *args)[0]
    g8 = compute.gemm_time(p8, compute.rates(p8), *args)[0]
    assert g8 / g4 == pytest.approx(R_4_8, rel=1e-6)


# ------------------------------------------------------------------------------------------------ the LM head

@pytest.mark.parametrize("precision", ["fp8", "fp4"])
def test_the_lm_head_runs_in_bf16_whatever_the_recipe(precision: str):
    """Megatron-Core's output layer is a plain ColumnParallelLinear outside Transformer Engine's autocast, so its
    GEMM costs the same in fp8/fp4 runs as in bf16: tok·2hV / (2.5 PF x 0.729 x 0.775) on GB200 (nemo profile)."""
    tok, tp = np.array([8192.0]), np.array([1.0])
    lo, bf = _problem("llama3-8b", "gb200x8", precision), _problem("llama3-8b", "gb200x8", "bf16")
    h_lo = compute.head_time(lo, compute.rates(lo), tok, tp)[0]
    h_bf = compute.head_time(bf, compute.rates(bf), tok, tp)[0]
    assert h_lo == pytest.approx(h_bf, rel=1e-12)
    m = lo.model
    gemm = 8192 * 2 * m.hidden_size * m.vocab_size / (2500e12 * 0.729 * 0.775)
    logits = 8192 * m.vocab_size * 6.0 / (8.0e12 * 0.85)
    assert h_lo == pytest.approx(gemm + logits, rel=1e-9)


# ------------------------------------------------------------------------------- ZeRO-3 of experts over EDP ranks

def test_zero3_gathers_expert_weights_over_the_expert_data_group_across_the_network():
    """gpt-oss style ZeRO-3 on 64 B300s with EP 8: dense weights shard over the 64 data ranks (1 apart: 8 per
    board, 1/8 of the bytes cross the NIC), expert weights over the 8 expert-data ranks 8 apart (one per board: all
    of the bytes cross the NIC). Gathering S_d = 0.1 GB dense + S_e = 1 GB expert bf16 weights with no compute to
    hide behind: 7/8·S_d/NVLink + 7/8·(S_d/8)/NIC + 7/8·S_e/NIC + latencies, NVLink 900 x 0.80, NIC 100 x 0.92 GB/s.
    Counting the experts as sharded over all 64 ranks, as before, put only 1/8 of their bytes on the NIC."""
    c = load_cluster("b300x64")
    fab = fabric.Fabric(c, {}, 8e12)
    prof = compute.profile_for("nemo")
    one = np.array([1.0])
    s_d, s_e = 0.1e9 / 2, 1e9 / 2  # parameters (bf16 gathers move 2 B each)
    f, _ = fsdp_exposed(fab, prof, np.array([3]), one * (s_d + s_e), one * 64, one, one * 0, one * 0,
                        (one * s_e, one * 8, one * 8))
    nvl, nic = 900e9 * 0.80, 100e9 * 0.92
    lat_d = fabric.BASE_LATENCY_S + 2 * np.log2(8) * fabric.NVLINK_HOP_S + 2 * np.log2(8) * fabric.NETWORK_HOP_S
    lat_e = fabric.BASE_LATENCY_S + 2 * np.log2(8) * fabric.NETWORK_HOP_S
    dense = 7 / 8 * 0.1e9 / nvl + 7 / 8 * 0.1e9 / 8 / nic + lat_d
    expert = 7 / 8 * 1e9 / nic + lat_e
    assert f[0] == pytest.approx(dense + expert, rel=1e-9)
    flat, _ = fsdp_exposed(fab, prof, np.array([3]), one * (s_d + s_e), one * 64, one, one * 0, one * 0)
    assert f[0] > 3 * flat[0]


def test_fp4_on_a_gpu_without_fp4_tensor_cores_quantises_like_fp8():
    h100, b200 = load_cluster("h100x8").gpu, load_cluster("b200x8").gpu
    assert compute.cast_bytes(h100, "fp4") == compute.cast_bytes(h100, "fp8") == FP8_CAST_BYTES
    assert compute.cast_bytes(b200, "fp4") == NVFP4_CAST_BYTES and compute.cast_bytes(b200, "bf16") == 0.0
