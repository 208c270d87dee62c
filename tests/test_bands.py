"""Uncertainty bands (issue 24 item 1): split-conformal bands per regime from validate's residuals, backed off where a
regime has too few cases, the widest band for a feature no published run states, and every plan's band in the
document, the table, explain and the report."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import yaml
from conftest import run_plan_in_process

from planner.cost import bands
from planner.evidence.band_fit import conformal_band, min_cases
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import fit_bands  # noqa: E402


def test_conformal_order_statistics() -> None:
    """80 %: the floor((n+1)/10)-th and ceil(9(n+1)/10)-th smallest; none below 9 cases."""
    assert min_cases(0.8) == 9
    assert conformal_band(range(8)) is None
    assert conformal_band(range(9)) == (0, 8)  # the whole range: the small-sample inflation
    assert conformal_band(range(99)) == (9, 89)
    # a one-sided miss stays one-sided
    lo, hi = conformal_band([-0.3, -0.25, -0.2, -0.2, -0.15, -0.1, -0.1, -0.05, -0.02, 0.01] * 3)
    assert lo <= -0.25 and hi <= 0.01


def test_bands_file_is_what_the_script_writes_from_the_recorded_validate() -> None:
    """bands.yaml must be regenerated (bench/fit_bands.py) whenever validate's output moves: the recorded validate
    snapshot gives exactly the file's content."""
    report = json.loads((ROOT / "tests" / "snapshots" / "validate.out").read_text())
    doc = fit_bands.document(report, fit_bands.lenders(), fit_bands.PROFILE_NAMES)
    shipped = yaml.safe_load(bands.BANDS_FILE.read_text())
    shipped.pop("date")
    assert yaml.safe_load(fit_bands.render(doc)) == shipped


def test_every_regime_band_holds_its_coverage_of_its_cases() -> None:
    report = json.loads((ROOT / "tests" / "snapshots" / "validate.out").read_text())
    residual = {c["id"]: c["residual"]["throughput"] for c in report["cases"] if "throughput" in c.get("residual", {})}
    doc = yaml.safe_load(bands.BANDS_FILE.read_text())
    for entry in doc["throughput"]:
        if entry["band"] is None:
            assert entry["n"] < doc["min_cases"]
            continue
        lo, hi = entry["band"]
        inside = sum(lo <= residual[i] <= hi for i in entry["cases"])
        assert inside / entry["n"] >= doc["coverage"], entry


def test_back_off_and_widest_band_say_so() -> None:
    t = bands.table()
    # megatron-core MoE on Ampere has no published case: the band comes from a coarser regime and says which
    moe = bands.band_for("megatron-core", True, "a100", ())
    assert moe.notes and "backed off" in moe.notes[0]
    # DualPipe: no published case states it, so the widest band of the table
    dual = bands.band_for("megatron-core", True, "h100", ("dualpipe",))
    assert (dual.lo, dual.hi) == t.widest and "widest band" in dual.regime
    # a feature only widens: the plan's band is the envelope of its base and its features
    base = bands.band_for("megatron-core", False, "h100", ())
    cp = bands.band_for("megatron-core", False, "h100", ("cp",))
    assert cp.lo <= base.lo and cp.hi >= base.hi and cp.cases == base.cases


def test_unknown_gpu_backs_off_to_every_generation() -> None:
    band = bands.band_for("megatron-core", False, "custom", ())
    assert "unknown" in band.notes[0]


def test_plan_document_band_is_the_price_times_the_regime_band() -> None:
    proc = run_plan_in_process("--model", "llama3-8b", "--cluster", "h100x64", "--format", "json", "--top", "2")
    doc = json.loads(proc.stdout)
    assert doc["schema_version"] == 10
    p = Problem(load_model("llama3-8b"), load_cluster("h100x64"), TrainingSpec(framework="megatron-core"))
    for plan in doc["plans"]:
        band, m = plan["band"], plan["metrics"]
        layout = {"recompute": _code("recompute", plan["layout"]["recompute"]), "cp": plan["layout"]["cp"],
                  "schedule": _code("schedule", plan["layout"]["schedule"]),
                  "cp_comm": _code("cp_comm", plan["layout"]["cp_comm"])}
        expect = bands.throughput_band(p, layout)
        assert band["tokens_per_s_per_gpu"][0] == pytest.approx(m["tokens_per_s_per_gpu"] * math.exp(expect.lo),
                                                                 rel=1e-3)
        assert band["step_time_s"][1] == pytest.approx(m["step_time_s"] * math.exp(-expect.lo), rel=1e-3)
        assert band["regime"] == expect.regime and band["coverage"] == 0.8


def _code(knob: str, label: str) -> int:
    from planner.inputs.layout import encode

    return encode(knob, str(label))[1]


def test_table_explain_and_report_print_the_band(tmp_path: Path) -> None:
    table = run_plan_in_process("--model", "llama3-8b", "--cluster", "h100x64")
    assert "band: #1 " in table.stdout and "published runs of its regime" in table.stdout
    explain = run_plan_in_process("explain", "--model", "llama3-8b", "--cluster", "h100x64", "--layout", "tp=1")
    assert "band (80% of published runs of its regime)" in explain.stdout
    out = tmp_path / "r.html"
    report = run_plan_in_process("report", "--model", "llama3-8b", "--cluster", "h100x8", "--global-batch", "64",
                                 "-o", str(out))
    assert report.returncode == 0, report.stderr
    assert "band: #1 " in out.read_text()


def test_accuracy_doc_shows_the_bands_file() -> None:
    """docs/accuracy.md's bands block is rendered from planner/cost/bands.yaml (bench/fit_bands.py --write splices it):
    the numbers a reader sees are the numbers the planner prices with."""
    from pathlib import Path

    import yaml

    from planner.cost.bands import BANDS_FILE
    from planner.evidence.band_fit import BEGIN, END, render_markdown

    doc = (Path(__file__).resolve().parents[1] / "docs" / "accuracy.md").read_text()
    block = doc.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")
    assert block == render_markdown(yaml.safe_load(BANDS_FILE.read_text())), "run python bench/fit_bands.py --write"


def test_every_catalog_gpu_has_a_generation():
    """A catalog GPU without one would back off to every generation's band and, for EP overlap, to the wrong TP
    pricing (planner.cost.tensor): each key of clusters/gpus.yaml is listed."""
    from planner.cost.bands import GENERATIONS
    from planner.inputs.catalog import gpu_catalog

    assert set(gpu_catalog()) <= set(GENERATIONS)
