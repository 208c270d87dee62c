"""Efficiency profiles, `plan calibrate` without a GPU, and bench/real_step.py's CPU-side behaviour (CPU only, fast).

The microbenchmarks themselves need a CUDA GPU and are not run here; what is tested is everything around them: the
profile format and its errors, applying a profile to the cost model, the GEMM shapes, the headline arithmetic, and
that every no-GPU path ends in one PlanInputError line rather than a traceback.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from planner.errors import PlanInputError
from planner.evidence.calibrate import detect_gpu_key, gemm_shapes, layer_gemm_shapes, run_calibration
from planner.inputs.catalog import load_gpu, load_model
from planner.inputs.hardware import HBM_EFFICIENCY
from planner.inputs.layout import KNOBS, Layout
from planner.inputs.problem import Problem
from planner.inputs.profile import (
    AttentionMeasurement,
    BandwidthMeasurement,
    GemmMeasurement,
    apply_profile,
    attention_flops,
    dump_profile,
    load_profile,
    profile_from_measurements,
    resolve_profile_path,
)
from planner.inputs.specs import ClusterSpec, TrainingSpec
from planner.search.search import price_layout

ROOT = Path(__file__).resolve().parents[1]

PROFILE_YAML = textwrap.dedent("""\
    schema_version: 1
    gpu: h100
    measured_on: "NVIDIA H100 80GB HBM3; driver 550.54.15; torch 2.13.0; 2025-06-01"
    matmul_efficiency: 0.72
    fp8_matmul_efficiency: 0.61
    attention_efficiency: 0.47
    hbm_tbps: 2.9
    gemm:
      - {m: 4096, n: 6144, k: 4096, dtype: bf16, tflops: 712.1}
      - {m: 4096, n: 6144, k: 4096, dtype: fp8, tflops: 1207.2}
    attention:
      - {batch: 4, heads: 32, seq: 4096, head_dim: 128, tflops: 464.8}
    memory_bandwidth:
      - {bytes: 1073741824, tbps: 2.9}
""")


def write(tmp_path: Path, text: str, name: str = "profile.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def h100():
    return load_gpu("h100", "test")


# --- the format ----------------------------------------------------------------------------------------------------
def test_round_trip_and_apply(tmp_path):
    profile = load_profile(write(tmp_path, PROFILE_YAML))
    assert profile.gpu == "h100" and profile.matmul_efficiency == 0.72 and len(profile.gemm) == 2
    assert profile.memory_bandwidth[0].bytes == 2**30
    gpu = h100()
    applied = apply_profile(gpu, profile)
    assert applied.matmul_efficiency == 0.72 != gpu.matmul_efficiency
    assert applied.fp8_matmul_efficiency == 0.61 != gpu.fp8_matmul_efficiency
    assert applied.attention_efficiency == 0.47 != gpu.attention_efficiency
    # Stored so that the cost model's HBM_EFFICIENCY discount yields exactly the measured bandwidth.
    assert applied.hbm_tbps * HBM_EFFICIENCY == pytest.approx(2.9)
    assert (applied.bf16_tflops, applied.memory_gib, applied.key) == (gpu.bf16_tflops, gpu.memory_gib, "h100")
    assert gpu.matmul_efficiency == 0.803  # the catalog spec itself is untouched (frozen copy)
    # What dump_profile writes, load_profile reads back identically.
    dump_profile(profile, tmp_path / "again.yaml")
    assert load_profile(tmp_path / "again.yaml") == profile


def test_minimal_profile_keeps_catalog_fp8(tmp_path):
    text = "schema_version: 1\ngpu: h100\nmeasured_on: by hand\nmatmul_efficiency: 0.7\n" \
           "attention_efficiency: 0.5\nhbm_tbps: 3.0\n"
    profile = load_profile(write(tmp_path, text))
    assert profile.gemm == [] and profile.fp8_matmul_efficiency is None
    assert apply_profile(h100(), profile).fp8_matmul_efficiency == h100().fp8_matmul_efficiency


def test_json_profile_is_read(tmp_path):
    import json

    import yaml

    path = write(tmp_path, json.dumps(yaml.safe_load(PROFILE_YAML)), "profile.json")
    assert load_profile(path).attention_efficiency == 0.47


def _replace(line: str, new: str | None) -> str:
    out = []
    for row in PROFILE_YAML.splitlines():
        if row.startswith(line):
            if new is not None:
                out.append(new)
        else:
            out.append(row)
    return "\n".join(out) + "\n"


BAD = {
    "missing schema_version": (_replace("schema_version", None), "schema_version", "missing"),
    "schema_version 2": (_replace("schema_version", "schema_version: 2"), "schema_version", "unsupported"),
    "efficiency above 1": (_replace("matmul_efficiency", "matmul_efficiency: 1.2"), "matmul_efficiency", "1"),
    "attention efficiency 0": (_replace("attention_efficiency", "attention_efficiency: 0"), "attention_efficiency",
                               "0.01"),
    "efficiency as bool": (_replace("matmul_efficiency", "matmul_efficiency: true"), "matmul_efficiency",
                           "true/false"),
    "negative bandwidth": (_replace("hbm_tbps", "hbm_tbps: -2.0"), "hbm_tbps", "greater than"),
    "infinite bandwidth": (_replace("hbm_tbps", "hbm_tbps: .inf"), "hbm_tbps", "finite"),
    "negative raw bandwidth": (PROFILE_YAML.replace("tbps: 2.9}", "tbps: -2.0}"), "memory_bandwidth.0.tbps",
                               "greater than"),
    "bad gemm dtype": (PROFILE_YAML.replace("dtype: fp8", "dtype: fp16"), "gemm.1.dtype", "bf16"),
    "missing gpu": (_replace("gpu:", None), "gpu", "required"),
    "not YAML": ("schema_version: 1\ngpu: [h100\n", "profile", "invalid YAML"),
    "python tag": ("schema_version: 1\ngpu: !!python/object/apply:os.system ['echo pwned']\n", "profile",
                   "refused YAML tag"),
    "not a mapping": ("- 1\n- 2\n", "profile", "expected a mapping"),
    "empty": ("\n", "profile", "empty"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_profiles_name_the_field(tmp_path, case):
    text, field, words = BAD[case]
    path = write(tmp_path, text)
    with pytest.raises(PlanInputError) as info:
        load_profile(path)
    err = info.value
    assert err.field == field, err.one_line()
    assert words in err.message, err.one_line()
    assert err.source == str(path) and err.fix
    assert "\n" not in err.one_line()


def test_missing_file_names_the_profile(tmp_path):
    with pytest.raises(PlanInputError) as info:
        load_profile(tmp_path / "nope.yaml")
    assert info.value.field == "profile" and "not found" in info.value.message


def test_unknown_key_warns_once(tmp_path, capsys):
    load_profile(write(tmp_path, PROFILE_YAML + "matmul_eficiency: 0.9\n"))
    err = capsys.readouterr().err
    assert err.count("warning") == 1 and "did you mean 'matmul_efficiency'" in err


def test_apply_warns_when_gpu_differs(tmp_path, capsys):
    profile = load_profile(write(tmp_path, PROFILE_YAML))
    apply_profile(h100(), profile)
    assert capsys.readouterr().err == ""
    applied = apply_profile(load_gpu("a100", "test"), profile)
    err = capsys.readouterr().err
    assert "warning" in err and "'h100'" in err and "'a100'" in err
    assert applied.matmul_efficiency == 0.72  # applied anyway: the user asked for it


def test_resolve_profile_path(tmp_path):
    cluster = tmp_path / "clusters" / "mine.yaml"
    assert resolve_profile_path(cluster, "profiles/h100.yaml") == tmp_path / "clusters" / "profiles" / "h100.yaml"
    assert resolve_profile_path(cluster, "../p.yaml") == tmp_path / "clusters" / ".." / "p.yaml"
    assert resolve_profile_path(cluster, str(tmp_path / "abs.yaml")) == tmp_path / "abs.yaml"
    assert resolve_profile_path(cluster, "~/p.yaml") == Path.home() / "p.yaml"
    for bad in ("", "   ", 3, None, "a\x00b"):
        with pytest.raises(PlanInputError) as info:
            resolve_profile_path(cluster, bad)  # type: ignore[arg-type]
        assert info.value.field == "profile" and info.value.source == str(cluster)


# --- the cost model reacts -------------------------------------------------------------------------------------------
def _price(gpu) -> dict[str, float]:
    cluster = ClusterSpec(name="test", gpu=gpu, num_gpus=8, network_gbps=50)
    problem = Problem(load_model("llama3-8b"), cluster, TrainingSpec(seq_len=8192, global_batch=64))
    layout = dict.fromkeys(KNOBS, 0)  # knobs not named here (categoricals) take their first value
    layout.update(tp=1, pp=1, dp=8, cp=1, ep=1, vpp=1, mbs=1, zero=1, recompute=0, sp=0, schedule=0)
    return price_layout(problem, Layout.from_dict(layout))


def test_higher_matmul_efficiency_predicts_faster(tmp_path):
    base = load_profile(write(tmp_path, PROFILE_YAML))
    slow = apply_profile(h100(), base.model_copy(update={"matmul_efficiency": 0.5}))
    fast = apply_profile(h100(), base.model_copy(update={"matmul_efficiency": 0.9}))
    t_slow, t_fast = _price(slow)["step_time_s"], _price(fast)["step_time_s"]
    assert t_fast < t_slow
    assert _price(fast)["memory_peak_gib"] == pytest.approx(_price(slow)["memory_peak_gib"])  # time only


def test_attention_and_bandwidth_reach_the_cost_model(tmp_path):
    base = load_profile(write(tmp_path, PROFILE_YAML))
    ref = _price(apply_profile(h100(), base))
    better_attn = apply_profile(h100(), base.model_copy(update={"attention_efficiency": 0.9}))
    better_hbm = apply_profile(h100(), base.model_copy(update={"hbm_tbps": 6.0}))
    assert _price(better_attn)["step_time_s"] < ref["step_time_s"]
    assert _price(better_hbm)["step_time_s"] < ref["step_time_s"]


# --- calibration pieces that need no GPU ------------------------------------------------------------------------------
def test_gemm_shapes_follow_tensor_parallel_splits():
    m = load_model("llama3-8b")  # h 4096, 32 heads x 128, 8 KV heads, ffn 14336, SwiGLU
    qkv, out, fc1, fc2 = layer_gemm_shapes(m, 4096, 1)
    assert (qkv.m, qkv.n, qkv.k) == (4096, 4096 + 2 * 1024, 4096)
    assert (out.n, out.k) == (4096, 4096) and (fc1.n, fc1.k) == (2 * 14336, 4096) and (fc2.n, fc2.k) == (4096, 14336)
    qkv8, out8, fc18, fc28 = layer_gemm_shapes(m, 8192, 8)
    assert qkv8.n == qkv.n // 8 and out8.k == out.k // 8 and fc18.n == fc1.n // 8 and fc28.k == fc2.k // 8
    assert qkv8.m == 8192
    shapes = gemm_shapes([m, load_model("llama3-70b")], (4096, 8192), (1, 2, 4, 8))
    assert len(shapes) == len(set(shapes)) and len(shapes) > 40
    assert all(s.m in (4096, 8192) and s.n > 0 and s.k > 0 for s in shapes)


def test_detect_gpu_key():
    assert detect_gpu_key("NVIDIA H100 80GB HBM3") == "h100"
    assert detect_gpu_key("NVIDIA H200") == "h200"
    assert detect_gpu_key("NVIDIA A100-SXM4-40GB") == "a100-40g"
    assert detect_gpu_key("NVIDIA A100-SXM4-80GB") == "a100"
    assert detect_gpu_key("NVIDIA B200") == "b200"
    assert detect_gpu_key("AMD Instinct MI300X") == "mi300x"
    assert detect_gpu_key("NVIDIA H100 PCIe") is None  # other peaks than the SXM part: the user must say --gpu
    assert detect_gpu_key("NVIDIA GeForce RTX 4090") is None


def _measurements(bf16: float = 700.0, attn: float = 450.0):
    gemm = [GemmMeasurement(m=4096, n=4096, k=4096, dtype="bf16", tflops=bf16 * 0.9),
            GemmMeasurement(m=8192, n=4096, k=4096, dtype="bf16", tflops=bf16),
            GemmMeasurement(m=8192, n=4096, k=4096, dtype="fp8", tflops=1400.0)]
    attention = [AttentionMeasurement(batch=4, heads=32, seq=4096, head_dim=128, tflops=attn)]
    bandwidth = [BandwidthMeasurement(bytes=2**28, tbps=2.7), BandwidthMeasurement(bytes=2**30, tbps=2.95)]
    return gemm, attention, bandwidth


def test_headline_figures_are_the_best_against_the_catalog_peak(tmp_path):
    profile = profile_from_measurements(h100(), "test", *_measurements())
    assert profile.matmul_efficiency == round(700 / 989, 4)
    assert profile.fp8_matmul_efficiency == round(1400 / 1979, 4)
    assert profile.attention_efficiency == round(450 / 989, 4)
    assert profile.hbm_tbps == 2.95
    dump_profile(profile, tmp_path / "p.yaml")
    assert load_profile(tmp_path / "p.yaml") == profile
    # No fp8 tensor cores in the catalog entry: no fp8 figure, even if the list had one.
    assert profile_from_measurements(load_gpu("a100", "t"), "test", *_measurements(bf16=270,
                                                                                   attn=150)).fp8_matmul_efficiency \
        is None


def test_rate_above_the_catalog_peak_is_refused():
    with pytest.raises(PlanInputError) as info:
        profile_from_measurements(load_gpu("a100", "t"), "test", *_measurements(bf16=700))
    assert info.value.field == "gpu" and "--gpu" in (info.value.fix or "")


def test_attention_flops_convention():
    # Causal forward 4·b·h·s²·d/2; backward 2.5x: FlashAttention's benchmark convention and the cost model's.
    assert attention_flops(1, 1, 2, 1) == pytest.approx(4 * 4 / 2 * 3.5)


# --- no GPU: one clear error ------------------------------------------------------------------------------------------
def test_run_calibration_without_cuda(tmp_path):
    # This machine has no CUDA device (torch may or may not be installed): either way the same input error.
    out = tmp_path / "profile.yaml"
    with pytest.raises(PlanInputError) as info:
        run_calibration(out, quick=True)
    assert info.value.field == "device" and "CUDA" in info.value.message
    assert not out.exists()


def test_run_calibration_without_torch(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    with pytest.raises(PlanInputError) as info:
        run_calibration(tmp_path / "profile.yaml")
    assert info.value.field == "device"
    assert info.value.one_line() == ("device: plan calibrate needs PyTorch with CUDA "
                                     "(fix: run it on a GPU machine with torch installed)")


def test_run_calibration_checks_out_before_measuring(tmp_path):
    with pytest.raises(PlanInputError) as info:
        run_calibration(tmp_path / "missing-dir" / "p.yaml")
    assert info.value.field == "--out"


def test_calibrate_command_registers_and_propagates(tmp_path):
    from cli.commands.calibrate import register

    app = typer.Typer()

    @app.callback()
    def _root() -> None:  # a group, as in cli.main, so `calibrate` is a subcommand
        pass

    register(app)
    register(app)  # idempotent
    assert [c.name for c in app.registered_commands] == ["calibrate"]
    runner = CliRunner()
    helped = runner.invoke(app, ["calibrate", "--help"])
    assert helped.exit_code == 0 and "--out" in helped.output and "--quick" in helped.output
    result = runner.invoke(app, ["calibrate", "--out", str(tmp_path / "p.yaml"), "--quick"])
    assert isinstance(result.exception, PlanInputError) and result.exception.field == "device"


def test_calibrate_cli_exits_2_with_one_line(tmp_path):
    # The way cli/main.py will run it: its run() maps PlanInputError to one stderr line and exit code 2.
    code = ("import sys; from cli.main import app, run; from cli.commands.calibrate import register; register(app); "
            f"sys.argv = ['plan', 'calibrate', '--out', {str(tmp_path / 'p.yaml')!r}]; run()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == ("error: device: plan calibrate needs PyTorch with CUDA "
                                "(fix: run it on a GPU machine with torch installed)")
    assert "Traceback" not in r.stderr and r.stdout == ""


# --- bench/real_step.py -----------------------------------------------------------------------------------------------
def test_real_step_help_without_cuda():
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "real_step.py"), "--help"], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and "--recompute" in r.stdout and "--profile" in r.stdout


def test_real_step_without_cuda_is_one_clear_error(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "real_step.py"), "--steps", "1", "--out",
                        str(tmp_path / "r.json")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2
    assert r.stderr.startswith("error: ") and "CUDA" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("script", ["grouped_gemm.py", "host_overhead.py", "fp8_accum.py"])
def test_gpu_bench_scripts_without_cuda_are_one_clear_error(script, tmp_path):
    out = tmp_path / "out.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--out", str(out)], capture_output=True,
                       text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr == f"error: device: bench/{script} needs PyTorch with CUDA (fix: run it on a GPU machine with " \
                       "torch installed)\n"
    assert not out.exists()


def test_real_step_selective_needs_torchtitan_blocks():
    """torchtitan's op-level policy counts matmuls in torchtitan's block layout: asking for it on the fused blocks is
    a usage error before any GPU work."""
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "real_step.py"), "--recompute", "selective"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and "--blocks torchtitan" in r.stderr and "Traceback" not in r.stderr


def test_real_step_prediction_matches_its_model():
    """The planner prices what the script trains: same parameter count, and recompute trades memory for time."""
    import importlib.util

    from planner.cost.flops import total_params
    from planner.inputs.catalog import model_from_mapping

    spec = importlib.util.spec_from_file_location("real_step", ROOT / "bench" / "real_step.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert total_params(model_from_mapping(mod.MODEL, "t")) == 1_235_814_400  # Llama-3.2-1B, tied embeddings
    none, full = mod.predict("h100", 1, "none"), mod.predict("h100", 1, "full")
    assert full["step_time_s"] > none["step_time_s"] and full["peak_allocated_gib"] < none["peak_allocated_gib"]
    assert mod.error_pct(1.1, 1.0) == pytest.approx(10.0)


def test_cluster_yaml_profile_key_changes_the_prediction(tmp_path):
    """A cluster YAML's `profile:` (relative to the cluster file) feeds measured efficiencies to the planner."""
    from planner.inputs.catalog import load_cluster

    (tmp_path / "h100.yaml").write_text("schema_version: 1\ngpu: h100\nmeasured_on: test\nmatmul_efficiency: 0.5\n"
                                        "attention_efficiency: 0.3\nhbm_tbps: 2.5\n")
    (tmp_path / "cluster.yaml").write_text("gpu: h100\nnodes: 1\nprofile: h100.yaml\n")
    measured = load_cluster(str(tmp_path / "cluster.yaml"))
    assert measured.gpu.matmul_efficiency == 0.5
    assert load_cluster("h100x8").gpu.matmul_efficiency != 0.5


def test_real_step_memory_readings_are_the_allocator_figures():
    """The measured side of the memory comparison reads torch's peak allocated / reserved and the device total (a
    fake torch stands in for CUDA), and the predicted side offers the same three figures, in order."""
    import importlib.util
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("real_step", ROOT / "bench" / "real_step.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    gib = 2**30
    cuda = SimpleNamespace(max_memory_allocated=lambda: 30 * gib, max_memory_reserved=lambda: 33 * gib,
                           mem_get_info=lambda: (40 * gib, 80 * gib))
    got = mod.memory_readings(SimpleNamespace(cuda=cuda))
    assert got == {"peak_allocated_gib": 30.0, "peak_reserved_gib": 33.0, "device_used_gib": 40.0}
    pred = mod.predict("h100", 1, "none")
    assert pred["peak_allocated_gib"] < pred["peak_reserved_gib"] < pred["device_used_gib"]
    assert {key for key, _ in mod.COMPARED} >= set(got)


def test_timings_queue_a_burst_behind_a_gpu_sleep():
    """Each timing is BURST calls issued while the GPU sleeps, divided by BURST: an event pair around one call from
    an idle GPU would add the host's launch latency (23-39 us measured on two H100 hosts) to every kernel."""
    from planner.evidence import calibrate

    log: list[str] = []

    class FakeEvent:
        def __init__(self, enable_timing: bool) -> None:
            self.at = 0.0

        def record(self) -> None:
            log.append("record")
            self.at = len([x for x in log if x == "call"]) * 2.0  # each call takes 2 ms of GPU time

        def synchronize(self) -> None:
            pass

        def elapsed_time(self, end: FakeEvent) -> float:
            return end.at - self.at

    class Cuda:
        Event = FakeEvent

        @staticmethod
        def synchronize() -> None:
            pass

        @staticmethod
        def _sleep(cycles: int) -> None:
            log.append(f"sleep {cycles}")

    class Torch:
        cuda = Cuda

    ms = calibrate.median_ms(Torch, lambda: log.append("call"), warmup=1, repeats=3, burst=4)
    assert ms == pytest.approx(2.0)
    timed = log[1:]  # after the warm-up call
    assert timed[:7] == [f"sleep {calibrate.SLEEP_CYCLES}", "record", "call", "call", "call", "call", "record"]
    assert timed.count("call") == 3 * 4


def test_fp8_is_recorded_at_a_training_step_s_mix_of_accumulations():
    """One forward GEMM with fast accumulation, two backward ones without: the harmonic mean of equal FLOPs."""
    from planner.evidence.calibrate import training_mix_rate

    assert training_mix_rate(1500.0, 1500.0) == pytest.approx(1500.0)
    assert training_mix_rate(1600.0, 1400.0) == pytest.approx(3 / (1 / 1600 + 2 / 1400))
    assert 1400.0 < training_mix_rate(1600.0, 1400.0) < 1500.0  # nearer the slower, which runs twice
