"""The planner against measurements taken on a real GPU (bench/results/, written by bench/gpu_check.sh), priced
again with the model as it is now (bench/real_step.py --reprice; CPU only, no torch needed).

The bounds are the errors docs/accuracy.md ("Real hardware") reports, with room for run-to-run noise (two runs of
the same eager step on two H100 machines differed by 4 %); a cost-model change that moves a prediction outside them
must say why in that section.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "h100-2026-11-27"


@pytest.fixture(scope="module")
def real_step():
    spec = importlib.util.spec_from_file_location("real_step_bench", ROOT / "bench" / "real_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def repriced(real_step, results: Path, name: str, framework: str, with_profile: bool = False) -> dict:
    """A stored report priced again by `framework` (with the lease's own profile too, where asked), by (mbs,
    recompute)."""
    from planner.inputs.profile import load_profile

    profile_path = results / "profile.yaml"
    profile = load_profile(str(profile_path)) if with_profile else None
    doc = real_step.reprice(str(results / f"{name}.json"), profile, str(profile_path) if with_profile else None,
                            framework)
    return {(r["mbs"], r["recompute"]): r for r in doc["runs"]}


def priced(real_step, name: str, framework: str, with_profile: bool = False) -> list[dict]:
    return list(repriced(real_step, RESULTS, name, framework, with_profile).values())


def err(row: dict, key: str, which: str = "predicted") -> float:
    return (row[which][key] - row["measured"][key]) / row["measured"][key]


def test_stored_runs_are_the_script_s_model(real_step):
    """Each stored report measured the model and sequence the script trains, every configuration ran (no OOM)."""
    for name in ("real_step", "expandable", "compiled"):
        runs = priced(real_step, name, "generic")
        assert {(r["mbs"], r["recompute"]) for r in runs} == {(m, rc) for m in (1, 2, 4) for rc in ("none", "full")}
        assert not any(r["measured"]["oom"] for r in runs)
    for name in ("tt_eager", "tt_compiled"):
        runs = priced(real_step, name, "torchtitan")
        assert {(r["mbs"], r["recompute"]) for r in runs} == {(m, rc) for m in (1, 2)
                                                             for rc in ("none", "selective", "full")}
        assert not any(r["measured"]["oom"] for r in runs)


@pytest.mark.parametrize("name", ["real_step", "expandable"])
def test_step_time_with_the_calibrated_profile(real_step, name):
    """With the profile `plan calibrate` measured on the same machine, the eager step is priced within 10 %
    (reported: -6.0 to +1.8 %); from the catalog alone `generic` prices it faster than it ran."""
    for row in priced(real_step, name, "generic", with_profile=True):
        assert abs(err(row, "step_time_s", "predicted_profile")) <= 0.10, row["mbs"]
        assert err(row, "step_time_s") < 0.0


@pytest.mark.parametrize(("name", "bound"), [("real_step", 0.10), ("compiled", 0.10)])
def test_peak_allocated_without_recompute(real_step, name, bound):
    """The torchtitan profile (eager PyTorch: 12 bytes per logit at an eager loss, 4 compiled; the eager SwiGLU's
    kept silu(gate)) prices the peak of live tensors within 10 % without recompute (reported: +1.4 to +8.2 %)."""
    for row in priced(real_step, name, "torchtitan"):
        if row["recompute"] == "none":
            assert abs(err(row, "peak_allocated_gib")) <= bound, (name, row["mbs"], err(row, "peak_allocated_gib"))


@pytest.mark.parametrize("name", ["real_step", "compiled"])
def test_memory_per_sample(real_step, name):
    """What one more sample of 4,096 tokens adds to the peak (activations and the loss), which no fixed term can
    absorb: within 8 % of the measured slope, eager and compiled."""
    rows = {r["mbs"]: r for r in priced(real_step, name, "torchtitan") if r["recompute"] == "none"}

    def slope(which: str) -> float:
        return (rows[4][which]["peak_allocated_gib"] - rows[1][which]["peak_allocated_gib"]) / 3

    assert slope("predicted") == pytest.approx(slope("measured"), rel=0.08)


def test_compile_is_priced_faster_and_leaner(real_step):
    """torch.compile made the step 1.20-1.24x faster and the peak smaller at every configuration; the planner
    prices the same direction for the torchtitan stack."""
    eager = {(r["mbs"], r["recompute"]): r for r in priced(real_step, "real_step", "torchtitan")}
    comp = {(r["mbs"], r["recompute"]): r for r in priced(real_step, "compiled", "torchtitan")}
    for key, row in comp.items():
        for which in ("measured", "predicted"):
            assert row[which]["step_time_s"] < eager[key][which]["step_time_s"]
            assert row[which]["peak_allocated_gib"] < eager[key][which]["peak_allocated_gib"]


def _by_config(real_step, name: str) -> dict:
    return repriced(real_step, RESULTS, name, "torchtitan")


def test_op_level_selective_recompute_costs_what_it_measured(real_step):
    """torchtitan's blocks under its op-level selective checkpointing, compiled: the step took 1.080-1.087x the
    step without recompute; the planner prices the matmuls it re-runs (compute.unsaved_mm_flops) at 1.074-1.081x.
    Both within 2 points. (Eager, the policy's per-op Python made it 1.2-1.8x: host time the planner does not price,
    docs/accuracy.md.)"""
    runs = _by_config(real_step, "tt_compiled")
    for mbs in (1, 2):
        ratio = {w: runs[(mbs, "selective")][w]["step_time_s"] / runs[(mbs, "none")][w]["step_time_s"]
                 for w in ("measured", "predicted")}
        assert ratio["predicted"] == pytest.approx(ratio["measured"], abs=0.02), (mbs, ratio)
        assert ratio["predicted"] > 1.05  # the re-run matmuls are not free


def test_activation_slope_of_torchtitan_blocks(real_step):
    """torchtitan's block layout without recompute: what one more sample adds to the peak is priced within 3 %,
    eager (the SwiGLU's silu(gate) and the 12-byte loss) and compiled (4-byte loss)."""
    for name in ("tt_eager", "tt_compiled"):
        runs = _by_config(real_step, name)
        slope = {w: runs[(2, "none")][w]["peak_allocated_gib"] - runs[(1, "none")][w]["peak_allocated_gib"]
                 for w in ("measured", "predicted")}
        assert slope["predicted"] == pytest.approx(slope["measured"], rel=0.03), (name, slope)


# A second lease the same day (another H100 machine, session 11): the same eager step again, Llama 3 8B's layer
# shapes under torchtitan's blocks, and Qwen3-30B-A3B's MoE layers with all 128 experts on the one GPU.
RESULTS_S11 = ROOT / "bench" / "results" / "h100-2026-11-27-s11"


def priced_s11(real_step, name: str, framework: str = "torchtitan") -> dict:
    return repriced(real_step, RESULTS_S11, name, framework, with_profile=True)


def test_the_eager_step_repeats_on_another_machine(real_step):
    """The same script, shapes and settings on a second H100 machine: every configuration's step within 4 % of the
    first lease's (measured: within 1.6 %), so the bounds above are not one machine's luck."""
    first = {(r["mbs"], r["recompute"]): r for r in priced(real_step, "real_step", "generic")}
    second = priced_s11(real_step, "real_step", "generic")
    assert set(first) == set(second)
    for key, row in second.items():
        assert row["measured"]["step_time_s"] == pytest.approx(first[key]["measured"]["step_time_s"], rel=0.04), key


@pytest.mark.parametrize("name", ["tt8b_eager", "tt8b_compiled"])
def test_torchtitan_fitted_efficiency_is_slow_on_one_gpu(real_step, name):
    """Llama 3 8B's layer shapes on one GPU: torchtitan's kernel efficiency, fitted on its published multi-GPU rows,
    prices the step slower than it ran (measured: 2-20 %, median 13 % eager and 16 % compiled), as on the 1B shapes.
    Pricing six of those rows on the GPUs they ran (500 W Grand Teton H100s) raised the fit from 0.675 to 0.70 and
    narrowed this from 15-23 %; the rest is not kernel speed (docs/accuracy.md, "Real hardware"). Held here so a
    change that moves it is seen."""
    errors = [err(row, "step_time_s") for row in priced_s11(real_step, name).values()]
    assert all(0.0 <= e <= 0.30 for e in errors), errors
    assert sorted(errors)[len(errors) // 2] >= 0.10


@pytest.mark.parametrize(("name", "configs"), [("moe_eager", 4), ("moe_seq1024", 2), ("moe_compiled", 2)])
def test_moe_layers_with_every_expert_local(real_step, name, configs):
    """Qwen3-30B-A3B's layers (128 experts, 8 per token, 4 layers) on one GPU as torchtitan runs them: priced within
    20 % (-17 to +2 %; with Transformer Engine's per-expert host ops and launches, and the EP imbalance at
    EP 1, it was priced 36-141 % slow). The step was GPU-bound: the host issued it in well under the step's time."""
    runs = priced_s11(real_step, name)
    assert len(runs) == configs and not any(r["measured"]["oom"] for r in runs.values())
    for key, row in runs.items():
        assert abs(err(row, "step_time_s")) <= 0.20, (key, err(row, "step_time_s"))
        assert row["measured"]["host_issue_s"] < 0.6 * row["measured"]["step_time_s"]


# A third lease (session 11) after the timing fix (calibrate.median_ms: bursts behind a GPU sleep, no host latency).
RESULTS_S11B = ROOT / "bench" / "results" / "h100-2026-11-27-s11b"


def test_the_unbiased_profile_prices_the_eager_step_within_seven_percent(real_step):
    """With the profile re-measured without the launch-latency bias (best bf16 GEMM 82.5 % of peak, not 76.3 %),
    the eager 1B step of the same machine is priced -6 to +3 % (generic at NeMo's kernel efficiency, 0.775 of
    MAMF; at DGX Cloud's 0.825 it was 2-10 % fast)."""
    from planner.inputs.profile import load_profile

    path = RESULTS_S11B / "profile.yaml"
    profile = load_profile(str(path))
    assert profile.matmul_efficiency > 0.8 and profile.fp8_matmul_efficiency > 0.75
    doc = real_step.reprice(str(RESULTS_S11 / "real_step.json"), profile, str(path), "generic")
    errors = [err(row, "step_time_s", "predicted_profile") for row in doc["runs"]]
    assert all(abs(e) <= 0.07 for e in errors), errors


# (results, GPU, {mode: (median bound, P90 bound)})
GROUPED_GEMM_RUNS = [
    ("h100-2026-11-27-s11b", "h100", {"grouped": (0.10, 0.25), "looped": (0.10, 0.25)}),
    ("h200-2026-11-28", "h200", {"grouped": (0.13, 0.40), "looped": (0.12, 0.26)}),
]


@pytest.mark.parametrize(("results", "gpu_key", "bounds"), GROUPED_GEMM_RUNS)
def test_grouped_expert_gemms_follow_the_planner_s_curves(results, gpu_key, bounds):
    """The 72 re-timed expert GEMMs (bench/grouped_gemm.py, bf16, 32-8192 tokens per expert): the cost model's own
    terms (tokens-per-expert and depth curves, the weight-streaming floor, one launch per kernel: per expert where
    looped) price them on the H100 at a median |ln err| of 0.074 grouped and 0.084 looped (P90 0.19 / 0.18). On the
    H200 the looped cuBLAS GEMMs stream a few experts' weights at 3.5-4.2 TB/s, the floor's rate, but
    torch._grouped_mm at 32-64 tokens per expert reaches only 2.7-3.1 TB/s, as on the H100: its P90 (0.375) is
    those rows, where the floor prices the H200's HBM (docs/accuracy.md, "Fourth lease: one H200")."""
    import json
    import math
    import statistics

    from planner.cost import expert
    from planner.cost.compute import HBM_EFFICIENCY
    from planner.inputs.catalog import load_gpu
    from planner.inputs.hardware import KERNEL_OVERHEAD_S

    gpu = load_gpu(gpu_key, "test")
    rate = gpu.bf16_tflops * 1e12 * gpu.matmul_efficiency
    hbm = gpu.hbm_tbps * 1e12 * HBM_EFFICIENCY
    half = expert.gemm_depth_half(gpu, "bf16")
    m0, m_ref = expert.GROUPED_GEMM_HALF_TOKENS, expert.GROUPED_GEMM_REFERENCE_TOKENS
    ref = m_ref / (m_ref + m0)
    rows = json.loads((ROOT / "bench" / "results" / results / "grouped_gemm.json").read_text())["rows"]
    assert len(rows) == 72
    for mode in ("grouped", "looped"):
        errors = []
        for r in rows:
            e, m, k, n = r["experts"], r["tokens_per_expert"], r["k"], r["n"]
            flops = 2.0 * e * m * k * n
            tokens_rate = min(m / (m + m0) / ref, 1.0)
            compute = flops / (rate * tokens_rate * float(expert._depth_rate(k, half)))
            priced = max(compute, 2.0 * e * k * n / hbm) + (e if mode == "looped" else 1) * KERNEL_OVERHEAD_S
            errors.append(abs(math.log(priced * r[f"{mode}_tflops"] * 1e12 / flops)))
        assert statistics.median(errors) <= bounds[mode][0], mode
        assert sorted(errors)[int(0.9 * len(errors))] <= bounds[mode][1], mode


def test_a_training_step_s_fp8_gain_is_what_the_catalog_prices():
    """One fp8 forward GEMM with fast accumulation and two backward ones without (Transformer Engine's recipes), timed
    on the 48 layer GEMMs of Llama 3 8B and 70B (bench/fp8_accum.py): 1.80x bf16 at the median, within 5 % of the
    1.77x that the catalog's H100 fp8 and bf16 efficiencies price; fast accumulation alone would be 1.87x."""
    import json

    from planner.cost.compute import gemm_efficiency
    from planner.inputs.catalog import load_gpu

    doc = json.loads((RESULTS_S11B / "fp8_accum.json").read_text())
    gpu = load_gpu("h100", "test")
    priced = gpu.fp8_tflops * gemm_efficiency(gpu, "fp8") / (gpu.bf16_tflops * gemm_efficiency(gpu, "bf16"))
    step = doc["summary"]["fp8_step_over_bf16_median"]
    assert step == pytest.approx(priced, rel=0.05)
    assert doc["summary"]["fp8_fast_over_bf16_median"] > step > doc["summary"]["fp8_full_over_bf16_median"]
    assert len(doc["rows"]) == 48


# A fourth GPU lease (session 14): one H200 (141 GB HBM3e, the same GH100 silicon as the H100 SXM), the same tools and
# torch as the H100 leases, so each figure has an H100 twin measured with the same code.
RESULTS_H200 = ROOT / "bench" / "results" / "h200-2026-11-28"


def priced_h200(real_step, name: str, framework: str) -> dict:
    return repriced(real_step, RESULTS_H200, name, framework)


def test_h200_gemms_outrun_h100_s_by_what_the_catalog_prices():
    """`plan calibrate` timed the same 96 bf16 layer GEMMs on both GPUs: the H200 ran them a median 1.029x faster
    (same silicon, HBM3e), the ratio the catalog's H200 efficiency carries over H100's MAMF figure."""
    import statistics

    import yaml

    from planner.inputs.catalog import load_gpu

    def rates(path: Path) -> dict:
        doc = yaml.safe_load(path.read_text())
        return {(g["m"], g["n"], g["k"]): g["tflops"] for g in doc["gemm"] if g["dtype"] == "bf16"}

    h100, h200 = rates(RESULTS_S11B / "profile.yaml"), rates(RESULTS_H200 / "profile.yaml")
    assert len(h200) == 96 and set(h200) == set(h100)
    measured = statistics.median(h200[s] / h100[s] for s in h200)
    catalog = load_gpu("h200", "test").matmul_efficiency / load_gpu("h100", "test").matmul_efficiency
    assert measured > 1.01
    assert catalog == pytest.approx(measured, abs=0.005)


def test_h200_eager_step_speedup_over_h100_is_priced(real_step):
    """The eager 1B step ran 1.08-1.15x faster on the H200 than on the H100 (HBM-bound elementwise work and faster
    GEMMs); the planner prices 1.07-1.10x: within 5 % at every configuration, within 2 % at the median."""
    import statistics

    h100 = priced_s11(real_step, "real_step", "generic")
    h200 = priced_h200(real_step, "real_step", "generic")
    gaps = []
    for key, row in h100.items():
        speedup = {w: row[w]["step_time_s"] / h200[key][w]["step_time_s"] for w in ("measured", "predicted")}
        assert speedup["measured"] > 1.05 and speedup["predicted"] > 1.05, key
        gaps.append(speedup["predicted"] / speedup["measured"] - 1.0)
    assert all(abs(g) <= 0.05 for g in gaps), gaps
    assert abs(statistics.median(gaps)) <= 0.02


def test_h200_peak_allocated_up_to_eight_samples(real_step):
    """The H200's memory let the eager step run 8 samples of 4,096 tokens without recompute (111 GiB allocated): the
    torchtitan profile prices every peak within 10 % and the slope from 1 to 8 samples within 3 %."""
    runs = {k[0]: r for k, r in priced_h200(real_step, "real_step", "torchtitan").items() if k[1] == "none"}
    assert sorted(runs) == [1, 2, 4, 8] and runs[8]["measured"]["peak_allocated_gib"] > 100
    for mbs, row in runs.items():
        assert abs(err(row, "peak_allocated_gib")) <= 0.10, (mbs, err(row, "peak_allocated_gib"))
    slope = {w: (runs[8][w]["peak_allocated_gib"] - runs[1][w]["peak_allocated_gib"]) / 7
             for w in ("measured", "predicted")}
    assert slope["predicted"] == pytest.approx(slope["measured"], rel=0.03)


def test_h200_moe_layers_and_8b_layers(real_step):
    """On the H200 as on the H100: Qwen3-30B-A3B's MoE layers (every expert local, torchtitan's grouped GEMMs) priced
    within 20 % (measured -14 to -4 %), and Llama 3 8B's layers priced slow by torchtitan's fitted efficiency
    (+11 to +26 %: the fit still carries what is not kernel speed)."""
    for name in ("moe_eager", "moe_seq1024"):
        for key, row in priced_h200(real_step, name, "torchtitan").items():
            assert abs(err(row, "step_time_s")) <= 0.20, (name, key, err(row, "step_time_s"))
    errors = [err(row, "step_time_s") for row in priced_h200(real_step, "tt8b_eager", "torchtitan").values()]
    assert all(0.0 <= e <= 0.30 for e in errors), errors


def test_h200_fp8_step_gain_is_what_the_catalog_prices():
    """A training step's fp8 GEMM mix ran 1.80x bf16 on the H200 too (1.796; H100 1.800), within 3 % of what the
    catalog's H200 efficiencies price (MAMF's fp8 0.734 over the measured bf16 0.826: 1.78x)."""
    import json

    from planner.cost.compute import gemm_efficiency
    from planner.inputs.catalog import load_gpu

    doc = json.loads((RESULTS_H200 / "fp8_accum.json").read_text())
    gpu = load_gpu("h200", "test")
    priced = gpu.fp8_tflops * gemm_efficiency(gpu, "fp8") / (gpu.bf16_tflops * gemm_efficiency(gpu, "bf16"))
    assert doc["summary"]["fp8_step_over_bf16_median"] == pytest.approx(priced, rel=0.03)



def test_per_expert_host_time_of_a_bf16_forward_is_under_what_is_priced():
    """bench/host_overhead.py's per-local-expert slopes (4-32 experts, five runs on the H200's host) in units of a
    torch.nn.Linear forward there: TE 2.x GroupedLinear's bf16 forward 0.67 (0.54-1.00), Megatron-Core's expert bias
    0.94 (0.75-1.09). Put on a DGX host (that Linear: 13.48 us), the GroupedLinear's is 9 us, where the planner prices
    one fitted eager op (34 us) per expert and GroupedLinear. Measured, not adopted (docs/accuracy.md, "Fourth lease"):
    priced so, Qwen3-235B's x86 Blackwell rows at 16 local experts go 20-30 points fast, so the fitted op stands in
    for per-expert work this probe does not run (fp8 weight workspaces, backward hooks)."""
    import json
    import statistics

    from planner.cost.fitted import current

    doc = json.loads((RESULTS_H200 / "host_overhead_experts.json").read_text())
    linear = "torch.nn.Linear forward (autograd recording)"
    assert len(doc["runs"]) == 5
    ratio = {probe: statistics.median(r["per_expert"][probe]["us_per_expert"] / r["host_us_per_call"][linear]
                                      for r in doc["runs"])
             for probe in ("TE GroupedLinear forward (bf16)", "Megatron-Core expert bias (autograd)")}
    assert ratio == pytest.approx({"TE GroupedLinear forward (bf16)": 0.67,
                                   "Megatron-Core expert bias (autograd)": 0.94}, abs=0.01)
    assert ratio["TE GroupedLinear forward (bf16)"] * 13.48e-6 < current().host_op_s / 3


def test_per_layer_graphs_cost_no_more_memory_than_priced():
    """bench/graph_memory.py on the H200: 16 Llama-1B-shaped blocks captured with torch.cuda.make_graphed_callables
    reserved 0.047 / 0.078 / 0.142 GiB more per layer than eager at 1 / 2 / 4 samples of 4,096 tokens (3.0 / 2.5 / 2.3
    hidden-sized tensors: the replay surfaces, partly reusing the shared pool), where the planner prices four
    (planner.cost.host.graph_buffer_bytes): the priced cost is an upper bound, 1.3-1.8x the measured one. Peak
    allocated falls under graphs (the pool's blocks are not counted as allocations at replay), so reserved is the
    figure compared."""
    import json

    rows = json.loads((RESULTS_H200 / "graph_memory.json").read_text())["rows"]
    assert [r["mbs"] for r in rows] == [1, 2, 4]
    for r in rows:
        hidden_tensor_gib = r["mbs"] * r["seq"] * 2048 * 2 / 2**30
        assert r["priced_gib_per_layer"] == pytest.approx(4 * hidden_tensor_gib)
        assert 0.0 < r["extra_reserved_gib_per_layer"] <= r["priced_gib_per_layer"]
        assert r["extra_reserved_gib_per_layer"] >= 2 * hidden_tensor_gib
        assert r["graphed"]["allocated_gib"] < r["eager"]["allocated_gib"]
