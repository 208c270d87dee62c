"""`plan sweep`: token amounts, batch rounding, the frontier, and the command as a user runs it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.errors import PlanInputError
from planner.inputs.sweep_args import global_batch_for, parse_amount, parse_counts, parse_gpus, parse_prices
from planner.report.sweep import SweepPoint, mark_frontier

ROOT = Path(__file__).resolve().parents[1]
SMALL = ("sweep", "--model", "llama3-8b", "--gpus", "h100,b200", "--counts", "8,64", "--train-tokens", "1T")


def plan(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300)


@pytest.mark.parametrize("raw,value", [("15T", 15 * 10**12), ("16M", 16 * 10**6), ("2.5e12", 25 * 10**11),
                                       ("4096", 4096), ("1.5b", 15 * 10**8), (" 3 k", 3000)])
def test_amounts(raw, value):
    assert parse_amount(raw, "--train-tokens", "15T") == value


@pytest.mark.parametrize("raw", ["", "T", "15X", "-1T", "0", "1e30", "nan"])
def test_bad_amounts(raw):
    with pytest.raises(PlanInputError, match="--train-tokens"):
        parse_amount(raw, "--train-tokens", "15T")


def test_lists_are_checked_and_normalised():
    assert parse_gpus("H100, b200,h100") == ["h100", "b200"]
    assert parse_counts("512,256,512") == [256, 512]
    assert parse_counts("256,512,...,8192") == [256, 512, 1024, 2048, 4096, 8192]
    assert parse_counts("64,128,...,256,1000") == [64, 128, 256, 1000]
    assert parse_counts("72,144,...,288") == [72, 144, 288]
    assert parse_counts("100,250,...,700") == [100, 250, 400, 550, 700]
    assert parse_prices(["h100=2.5", "b200=4"], ["h100", "b200"]) == {"h100": 2.5, "b200": 4.0}
    for bad in (lambda: parse_gpus("h1000"), lambda: parse_counts("256,x"), lambda: parse_counts("-8"),
                lambda: parse_counts("256,512,...,1000"), lambda: parse_counts("512,256,...,8192"),
                lambda: parse_counts("256,...,512"),
                lambda: parse_prices(["a100=1"], ["h100"]), lambda: parse_prices(["h100=free"], ["h100"])):
        with pytest.raises(PlanInputError):
            bad()


@pytest.mark.parametrize("count", [8, 72, 256, 1000, 6144, 8192, 16384])
def test_global_batch_follows_tokens_and_divides_for_model_parallel_layouts(count):
    gbs = global_batch_for(16 * 10**6, 8192, count)
    target = 16 * 10**6 / 8192
    unit = count
    while unit > target and unit % 2 == 0:
        unit //= 2
    assert gbs % unit == 0 and gbs >= unit
    assert abs(gbs - target) <= max(unit / 2, gbs - target)  # nearest multiple of the unit (or one unit)
    # a data-parallel size of count / 2^i (model parallel 2^i, at least count / unit) divides the batch
    assert gbs % (count // (count // unit)) == 0


def test_frontier_keeps_only_undominated_points():
    def point(gpu, count, days, hours):
        p = SweepPoint(gpu, count, 512, layout={"tp": 1}, metrics={})
        p.days, p.gpu_hours = days, hours
        return p

    pts = [point("a", 1, 10.0, 90.0), point("a", 2, 5.0, 120.0), point("b", 1, 6.0, 130.0),
           point("b", 2, 5.0, 100.0), SweepPoint("c", 1, 512)]
    assert mark_frontier(pts) == "gpu_hours"
    assert [p.frontier for p in pts] == [True, False, False, True, False]
    pts[0].cost_usd, pts[1].cost_usd, pts[2].cost_usd, pts[3].cost_usd = 500.0, 300.0, 100.0, 600.0
    assert mark_frontier(pts) == "cost_usd"
    assert [p.frontier for p in pts] == [False, True, True, False, False]


def test_frontier_treats_near_equal_cost_as_a_tie():
    slow = SweepPoint("a", 1, 512, layout={"tp": 1}, metrics={})
    fast = SweepPoint("a", 8, 512, layout={"tp": 1}, metrics={})
    slow.days, slow.gpu_hours = 80.0, 1000.0
    fast.days, fast.gpu_hours = 10.0, 1001.0  # 0.1 % more GPU-hours, 8x sooner
    mark_frontier([slow, fast])
    assert (slow.frontier, fast.frontier) == (False, True)
    fast.gpu_hours = 1100.0  # 10 % more: a real trade-off, both stay
    mark_frontier([slow, fast])
    assert (slow.frontier, fast.frontier) == (True, True)


def test_sweep_json_is_deterministic_and_stdout_only(tmp_path):
    first = plan(*SMALL, "--gpu-hour-price", "h100=2.5,b200=4", "--format", "json")
    second = plan(*SMALL, "--gpu-hour-price", "h100=2.5", "--gpu-hour-price", "b200=4", "--format", "json")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    doc = json.loads(first.stdout)
    assert doc["schema_version"] == 3 and doc["kind"] == "plan-sweep" and doc["frontier_axis"] == "cost_usd"
    assert [(p["gpu"], p["count"]) for p in doc["points"]] == [("h100", 8), ("h100", 64), ("b200", 8), ("b200", 64)]
    assert any(p["frontier"] for p in doc["points"])
    for p in doc["points"]:
        lay = p["layout"]
        assert lay["tp"] * lay["pp"] * lay["cp"] * lay["dp"] == p["count"]
        tokens_per_step = p["global_batch"] * doc["inputs"]["seq_len"]
        assert p["steps"] == -(-doc["inputs"]["train_tokens"] // tokens_per_step)
        busy = p["steps"] * p["metrics"]["step_time_s"]
        assert p["days_without_failures"] == pytest.approx(busy / 86400, rel=1e-4)
        assert 0.9 < p["goodput"]["goodput"] < 1  # 8 and 64 GPUs: MTBF of months, restarts rare
        seconds = busy / p["goodput"]["goodput"]
        assert p["days"] == pytest.approx(seconds / 86400, rel=1e-3)
        assert p["gpu_hours"] == pytest.approx(seconds * p["count"] / 3600, rel=1e-4)
        price = {"h100": 2.5, "b200": 4}[p["gpu"]]
        assert p["cost_usd"] == pytest.approx(p["gpu_hours"] * price, rel=1e-4)


def test_sweep_table_fits_80_columns_and_chart_is_byte_stable(tmp_path):
    charts = [tmp_path / "a.svg", tmp_path / "b.svg"]
    runs = [plan(*SMALL, "--chart", str(c)) for c in charts]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr
    out = runs[0].stdout
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "h100x64" in out and "b200x8" in out and "legend:" in out and "* frontier" in out
    assert out.count("\n*") >= 1  # the frontier is starred
    svg = charts[0].read_bytes()
    assert svg.startswith(b"<?xml") and b"<svg" in svg and svg == charts[1].read_bytes()


@pytest.mark.parametrize("args,field", [
    (("--gpus", "h1000"), "--gpus"), (("--counts", "0,8"), "--counts"), (("--train-tokens", "lots"), "--train-tokens"),
    (("--gpu-hour-price", "a100=3"), "--gpu-hour-price"), (("--chart", "out.png"), "--chart"),
    (("--format", "csv"), "--format"), (("--model", "nope-1b"), "--model"),
])
def test_bad_sweep_input_is_one_line_exit_2(args, field):
    base = {"--model": "llama3-8b", "--gpus": "h100", "--counts": "8", "--train-tokens": "1T"}
    base.update(dict([args]))
    flat = [x for kv in base.items() for x in kv]
    r = plan("sweep", *flat)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and field in r.stderr, r.stderr
    assert r.stdout == ""


def test_progress_goes_to_stderr_only_for_slow_sweeps(monkeypatch, capsys):
    from cli.commands import sweep as command

    monkeypatch.setattr(command, "PROGRESS_AFTER_S", 1e9)
    with command._progress() as report:
        report(1, 4, "h100x8")
    assert capsys.readouterr().err == ""  # a quick sweep says nothing
    monkeypatch.setattr(command, "PROGRESS_AFTER_S", 0.0)
    with command._progress() as report:
        report(1, 4, "h100x8")
        report(4, 4, "")
    captured = capsys.readouterr()
    assert captured.err == "sweep: 1/4 done, searching h100x8\n" and captured.out == ""


def test_the_training_recipe_reaches_every_point_and_the_inputs() -> None:
    """plan's recipe options (here bf16 Adam moments and token dropping) price every swept point and are recorded."""
    from planner.inputs.catalog import load_model
    from planner.report.sweep import SweepSpec, price_point, sweep_document

    m = load_model("qwen3-30b-a3b")
    plain = SweepSpec(m, ["h100"], [64], 10**12, 16_000_000, seq_len=4096)
    recipe = SweepSpec(m, ["h100"], [64], 10**12, 16_000_000, seq_len=4096,
                       recipe={"optimizer_moments": "bf16", "moe_capacity_factor": 1.0})
    a, b = price_point(plain, "h100", 64), price_point(recipe, "h100", 64)
    assert a.feasible and b.feasible and a.days != b.days  # the busiest expert rank computes 1.0, not 1.1, shares
    inputs = sweep_document(recipe, [b])["inputs"]
    assert (inputs["optimizer_moments"], inputs["moe_capacity_factor"]) == ("bf16", 1.0)
    assert sweep_document(plain, [a])["inputs"]["moe_capacity_factor"] is None  # every recipe key, defaults too


def test_muon_reaches_every_swept_point() -> None:
    """`plan sweep --optimizer muon` prices Muon at every point (it had been left out of the recipe keys)."""
    from planner.inputs.catalog import load_model
    from planner.report.sweep import SweepSpec, price_point, sweep_document

    m = load_model("llama3-8b")
    adam = SweepSpec(m, ["h100"], [16], 10**11, 4_000_000, seq_len=4096, framework="megatron-core")
    muon = SweepSpec(m, ["h100"], [16], 10**11, 4_000_000, seq_len=4096, framework="megatron-core",
                     recipe={"optimizer": "muon"})
    a, b = price_point(adam, "h100", 16), price_point(muon, "h100", 16)
    assert a.feasible and b.feasible and a.metrics != b.metrics
    assert sweep_document(muon, [b])["inputs"]["optimizer"] == "muon"
    assert sweep_document(adam, [a])["inputs"]["optimizer"] == "adam"
