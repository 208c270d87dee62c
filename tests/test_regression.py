"""The CI regression gate: `plan check --baseline` (exit 0 unchanged, 1 moved, 2 bad baseline) and `plan diff`.

Small problems only (llama3-8b on h100x16 plans in a few hundredths of a second), run in-process through
cli.main.run (exit codes and error lines included); one test runs the real entry point in a subprocess.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import run_plan_in_process

from cli.commands.check import register
from cli.main import app
from planner.errors import PlanInputError
from planner.report import document
from planner.report.compare import compare, replan
from planner.report.compare_text import diff_documents, format_comparison
from planner.report.plan_doc import problem_from_document

ROOT = Path(__file__).resolve().parents[1]
SMALL = ("--model", "llama3-8b", "--cluster", "h100x16", "--top", "3")
WIRED = "cli.commands" in (ROOT / "cli" / "app.py").read_text()  # the lead wires register(app) into cli/app.py

if not any(c.name in ("check", "diff") for c in app.registered_commands):
    register(app)


def plan(*args: str) -> subprocess.CompletedProcess:
    return run_plan_in_process(*args)


def record(tmp_path: Path, name: str, *args: str) -> Path:
    r = plan(*args, "--format", "json")
    assert r.returncode == 0, r.stderr
    path = tmp_path / name
    path.write_text(r.stdout)
    return path


def edited(tmp_path: Path, base: Path, name: str, edit: Any) -> Path:
    doc = json.loads(base.read_text())
    edit(doc)
    path = tmp_path / name
    path.write_text(json.dumps(doc, indent=2, sort_keys=True))
    return path


def assert_one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout[:500], r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ") and "(fix: " in lines[0], lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert r.stdout == ""
    return lines[0]


@pytest.fixture
def baseline(tmp_path: Path) -> Path:
    return record(tmp_path, "llama3-8b-h100x16.json", *SMALL)


# --- round trip -------------------------------------------------------------------------------------------------------
def test_round_trip_passes(baseline: Path):
    r = plan("check", "--baseline", str(baseline))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "OK" in lines[0] and str(baseline) in lines[0]
    assert "note:" not in lines[0]  # recorded from today's catalog: no drift


def test_replan_is_byte_identical(tmp_path: Path):
    """The rebuilt problem is exactly the recorded one: re-planning writes the same bytes `plan` wrote."""
    for i, args in enumerate([SMALL, (*SMALL, "--fix", "recompute=selective", "--fix", "tp=2"),
                              ("--model", "mixtral-8x7b", "--cluster", "h100x32", "--global-batch", "64",
                               "--framework", "megatron-core", "--precision", "fp8", "--allow-tp-across-nodes")]):
        path = record(tmp_path, f"b{i}.json", *args)
        text = path.read_text()
        assert document.dumps(replan(json.loads(text)), "json") == text


def test_problem_from_document_matches_the_cli_problem(baseline: Path):
    from cli.options import build_problem
    from cli.plan_options import PlanOptions

    doc = json.loads(record(baseline.parent, "fixed.json", *SMALL, "--fix", "recompute=full", "--fix", "sp=true",
                            "--framework", "torchtitan", "--allow-tp-across-nodes").read_text())
    want = build_problem(PlanOptions(model="llama3-8b", cluster="h100x16", framework="torchtitan",
                                     fix=("recompute=full", "sp=true"), allow_tp_across_nodes=True))
    assert problem_from_document(doc) == want


def test_yaml_baseline(tmp_path: Path):
    r = plan(*SMALL, "--format", "yaml")
    path = tmp_path / "b.yaml"
    path.write_text(r.stdout)
    assert plan("check", "--baseline", str(path)).returncode == 0


# --- changes are caught -----------------------------------------------------------------------------------------------
def test_modified_model_fails_and_names_the_key(tmp_path: Path, baseline: Path):
    path = edited(tmp_path, baseline, "layers.json", lambda d: d["inputs"]["model"].update(num_hidden_layers=16))
    r = plan("check", "--baseline", str(path))
    assert r.returncode == 1, r.stderr
    out = r.stdout
    assert out.startswith(f"plan check --baseline {path}\nFAIL: ")
    assert "model.num_hidden_layers" in out  # the recorded input that differs from the catalog's llama3-8b
    assert "model_summary.params" in out  # the recorded model summary no longer matches the inputs
    assert "tokens_per_s_per_gpu" in out and "%" in out
    assert "baseline" in out and "now" in out  # the old vs new columns
    assert ("rank-1 layout changed" in out) == ("rank-1 layout changes:" in out)  # a changed layout is itemised


def test_half_network_bandwidth_fails(tmp_path: Path):
    # Communication is exposed for llama3-70b on 64 GPUs with a small batch: halving the network slows rank 1
    # (about 2% today); the tight tolerance keeps this test about the gate, not about the size of the effect.
    base = record(tmp_path, "70b.json", "--model", "llama3-70b", "--cluster", "h100x64", "--global-batch", "128",
                  "--top", "2")
    doc = json.loads(base.read_text())
    bw = doc["inputs"]["cluster"]["network_gbps"]
    path = edited(tmp_path, base, "half.json", lambda d: d["inputs"]["cluster"].update(network_gbps=bw / 2))
    r = plan("check", "--baseline", str(path), "--tolerance", "0.001")
    assert r.returncode == 1, r.stderr
    assert "cluster.network_gbps" in r.stdout and f"{bw / 2:g}" in r.stdout
    assert "tokens_per_s_per_gpu" in r.stdout
    assert "comm_s" in r.stdout or "rank-1 layout changes:" in r.stdout  # what moved is explained


def test_tampered_metric_fails(tmp_path: Path, baseline: Path):
    def faster(d: dict) -> None:
        d["plans"][0]["metrics"]["tokens_per_s_per_gpu"] *= 1.05

    path = edited(tmp_path, baseline, "tampered.json", faster)
    r = plan("check", "--baseline", str(path))
    assert r.returncode == 1
    first = r.stdout.splitlines()[1]
    assert first.startswith("FAIL: ") and "tokens_per_s_per_gpu" in first and "-4.76%" in first
    assert "layout changed" not in r.stdout


@pytest.mark.parametrize(("factor", "tolerance", "code"), [
    (1.05, "0.06", 0), (1.05, "0.04", 1), (1.005, "0.01", 0), (1.02, "0.01", 1), (1.0, "0", 0), (1.000011, "0", 1),
])
def test_tolerance_respected(tmp_path: Path, baseline: Path, factor: float, tolerance: str, code: int):
    def scale(d: dict) -> None:
        d["plans"][0]["metrics"]["tokens_per_s_per_gpu"] *= factor

    path = edited(tmp_path, baseline, "scaled.json", scale)
    r = plan("check", "--baseline", str(path), "--tolerance", tolerance)
    assert r.returncode == code, r.stdout + r.stderr


def test_default_tolerance_is_one_percent(tmp_path: Path, baseline: Path):
    def scale(f: float):
        return lambda d: d["plans"][0]["metrics"].update(
            tokens_per_s_per_gpu=d["plans"][0]["metrics"]["tokens_per_s_per_gpu"] * f)

    assert plan("check", "-b", str(edited(tmp_path, baseline, "a.json", scale(1.009)))).returncode == 0
    assert plan("check", "-b", str(edited(tmp_path, baseline, "b.json", scale(1.012)))).returncode == 1


def test_layout_change_fails_even_at_same_throughput(tmp_path: Path, baseline: Path):
    path = edited(tmp_path, baseline, "zero.json", lambda d: d["plans"][0]["layout"].update(zero=0))
    r = plan("check", "--baseline", str(path), "--tolerance", "0.5")
    assert r.returncode == 1
    assert "rank-1 layout changed (zero 0 -> " in r.stdout


def test_no_feasible_plan_any_more_fails(tmp_path: Path, baseline: Path):
    # tp=3 does not divide 16 GPUs: nothing is feasible, which is a regression (exit 1), not bad input.
    path = edited(tmp_path, baseline, "tp3.json", lambda d: d["inputs"]["options"]["fix"].update(tp=3))
    r = plan("check", "--baseline", str(path))
    assert r.returncode == 1, r.stderr
    assert "no feasible plan" in r.stdout and "binding: world_size" in r.stdout


def _schema_1(d: dict) -> None:
    """A document as planners before the goodput fields wrote it: schema 1, no goodput, no cluster sections."""
    d["schema_version"] = 1
    for key in ("reliability", "storage"):
        d["inputs"]["cluster"].pop(key)
    for entry in d["plans"]:
        entry.pop("goodput")


def test_schema_1_baseline_still_checks_clean(tmp_path: Path, baseline: Path):
    """A version 1 baseline reads (its missing sections take their defaults) and shows no input change or drift."""
    path = edited(tmp_path, baseline, "v1.json", _schema_1)
    r = plan("check", "--baseline", str(path), "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    ok = json.loads(r.stdout)
    assert ok["passed"] is True and ok["inputs"] == [] and ok["catalog_drift"] == []
    assert plan("diff", str(path), str(baseline)).returncode != 2  # diff reads it too (2: an unreadable document)


def _schema_8(d: dict) -> None:
    """A document as planners before the shared-NIC term wrote it: schema 8, no breakdown `nic_comm_s`."""
    d["schema_version"] = 8
    for entry in d["plans"]:
        entry["breakdown"].pop("nic_comm_s")


def test_schema_8_baseline_shows_no_breakdown_move(tmp_path: Path, baseline: Path):
    """A version 8 baseline has no `nic_comm_s`; it reads as the 0 no older planner priced, not as a moved term."""
    path = edited(tmp_path, baseline, "v8.json", _schema_8)
    r = plan("check", "--baseline", str(path), "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    ok = json.loads(r.stdout)
    assert ok["passed"] is True and all(m["key"] != "nic_comm_s" for m in ok["breakdown"])
    assert "nic_comm_s" in json.loads(baseline.read_text())["plans"][0]["breakdown"]


def test_check_json_format(tmp_path: Path, baseline: Path):
    r = plan("check", "--baseline", str(baseline), "--format", "json")
    assert r.returncode == 0
    ok = json.loads(r.stdout)
    assert ok["passed"] is True and ok["reasons"] == [] and ok["layout"]["changes"] == [] and ok["inputs"] == []
    path = edited(tmp_path, baseline, "layers.json", lambda d: d["inputs"]["model"].update(hidden_size=2048))
    r = plan("check", "--baseline", str(path), "--format", "json")
    assert r.returncode == 1
    bad = json.loads(r.stdout)
    assert bad["passed"] is False and bad["reasons"]
    assert {"key": "model.hidden_size", "old": 2048, "new": 4096} in bad["catalog_drift"]
    gate = next(m for m in bad["metrics"] if m["key"] == "tokens_per_s_per_gpu")
    assert gate["old"] != gate["new"] and gate["rel_change"] is not None


# --- bad baselines: exit 2, one line ----------------------------------------------------------------------------------
def _wrong_schema(d: dict) -> None:
    d["schema_version"] = 99  # a version this planner does not read (it reads 2 and 3)


BAD = {
    "not-json.json": (b"this is not json {", ["invalid JSON"]),
    "empty.json": (b"", ["empty"]),
    "list.json": (b"[1, 2]", ["not a plan document", "list"]),
    "foreign.json": (b'{"hello": "world"}', ["schema_version", "not a plan document"]),
}
EDITS = {
    "wrong-schema.json": (_wrong_schema, ["schema_version", "99 is not supported"]),
    "no-inputs.json": (lambda d: d.pop("inputs"), ["inputs: missing"]),
    "no-model.json": (lambda d: d["inputs"].pop("model"), ["inputs.model: missing"]),
    "no-plans.json": (lambda d: d.update(plans=[]), ["plans", "non-empty"]),
    "typo.json": (lambda d: d["inputs"]["model"].update(num_hidden_layer=16), ["inputs.model", "num_hidden_layers"]),
    "bad-value.json": (lambda d: d["inputs"]["model"].update(hidden_size="big"), ["inputs.model.hidden_size"]),
    "bad-gpu.json": (lambda d: d["inputs"]["cluster"]["gpu"].update(memory_gib=-1), ["inputs.cluster.gpu.memory_gib"]),
    "bad-fix.json": (lambda d: d["inputs"]["options"].update(fix={"recompute": 7}), ["inputs.options.fix.recompute"]),
    "bad-knob.json": (lambda d: d["inputs"]["options"].update(fix={"tpp": 2}), ["unknown knob"]),
    "bad-framework.json": (lambda d: d["inputs"]["training"].update(framework="jax"), ["inputs.training.framework"]),
    "bad-top.json": (lambda d: d["inputs"]["options"].update(top=True), ["inputs.options.top"]),
    "bad-metric.json": (lambda d: d["plans"][0]["metrics"].update(tokens_per_s_per_gpu="fast"),
                        ["plans[0].metrics.tokens_per_s_per_gpu"]),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_unreadable_baseline_exits_2(tmp_path: Path, name: str):
    data, needles = BAD[name]
    path = tmp_path / name
    path.write_bytes(data)
    assert_one_line_error(plan("check", "--baseline", str(path)), str(path), *needles)


@pytest.mark.parametrize("name", sorted(EDITS))
def test_bad_baseline_exits_2(tmp_path: Path, baseline: Path, name: str):
    edit, needles = EDITS[name]
    path = edited(tmp_path, baseline, name, edit)
    assert_one_line_error(plan("check", "--baseline", str(path)), str(path), *needles)


def test_directory_and_missing_baseline_exit_2(tmp_path: Path):
    assert_one_line_error(plan("check", "--baseline", str(tmp_path)), "is a directory")
    assert_one_line_error(plan("check", "--baseline", str(tmp_path / "nope.json")), "file not found")


def test_bad_flags_exit_2(baseline: Path):
    assert_one_line_error(plan("check", "--baseline", str(baseline), "--tolerance", "-0.1"), "--tolerance")
    assert_one_line_error(plan("check", "--baseline", str(baseline), "--format", "xml"), "--format")
    assert_one_line_error(plan("check"), "--baseline")


def test_library_errors_are_plan_input_errors():
    for doc in (None, [], {"schema_version": 1}, {"schema_version": "1", "inputs": {}}):
        with pytest.raises(PlanInputError):
            problem_from_document(doc, source="x.json")


# --- diff -------------------------------------------------------------------------------------------------------------
def test_diff_shows_layout_change(tmp_path: Path):
    a = record(tmp_path, "tp1.json", *SMALL, "--fix", "tp=1")
    b = record(tmp_path, "tp2.json", *SMALL, "--fix", "tp=2")
    r = plan("diff", str(a), str(b))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"A = {a}" in out and f"B = {b}" in out
    assert "options.fix.tp" in out  # the input that differs
    assert "rank 1: layout changed" in out
    rank1 = out.split("rank 1:")[1].split("rank 2:")[0]
    assert any(line.split()[:3] == ["tp", "1", "2"] for line in rank1.splitlines())
    assert "tokens_per_s_per_gpu" in rank1 and "%" in rank1


def test_diff_of_identical_files(baseline: Path):
    r = plan("diff", str(baseline), str(baseline))
    assert r.returncode == 0
    assert "inputs: identical" in r.stdout and "layout changed" not in r.stdout
    assert "metrics: identical" in r.stdout


def test_diff_json(tmp_path: Path, baseline: Path):
    other = record(tmp_path, "gb256.json", *SMALL, "--global-batch", "256")
    r = plan("diff", str(baseline), str(other), "--format", "json")
    assert r.returncode == 0
    data = json.loads(r.stdout)
    assert {"key": "training.global_batch", "old": 512, "new": 256} in data["inputs"]
    assert [row["rank"] for row in data["ranks"]] == [1, 2, 3]


def test_diff_bad_file_exits_2(tmp_path: Path, baseline: Path):
    assert_one_line_error(plan("diff", str(baseline), str(tmp_path)), "is a directory")


# --- the library ------------------------------------------------------------------------------------------------------
def test_compare_library(baseline: Path):
    doc = json.loads(baseline.read_text())
    same = compare(doc, copy.deepcopy(doc))
    assert same.passed and not same.layout_changes and not same.inputs and not same.breakdown
    moved = copy.deepcopy(doc)
    moved["plans"][0]["layout"]["tp"] = 99
    moved["plans"][0]["breakdown"]["tp_comm_s"] = 1.5
    moved["planner_version"] = "9.9.9"
    moved["search"]["pruned"]["world_size"] += 1
    cmp = compare(doc, moved, tolerance=0.5)
    assert not cmp.passed
    assert [(c.key, c.new) for c in cmp.layout_changes] == [("tp", 99)]
    assert cmp.breakdown[0].key == "tp_comm_s"
    assert cmp.planner_version is not None and cmp.planner_version.new == "9.9.9"
    assert [c.key for c in cmp.pruned] == ["world_size"]
    text = format_comparison(cmp)
    assert "old" in text and "new" in text and "9.9.9" in text and "tp_comm_s" in text
    with pytest.raises(PlanInputError):
        compare(doc, doc, tolerance=-1)
    assert "A = " in diff_documents(doc, moved)


# --- the real entry point ---------------------------------------------------------------------------------------------
def test_entry_point_subprocess(baseline: Path, tmp_path: Path):
    """`python -m cli.main check` once cli/main.py wires the commands; until then the same run() with register(app)."""
    if WIRED:
        cmd = [sys.executable, "-m", "cli.main"]
    else:
        cmd = [sys.executable, "-c", "from cli.main import app, run; from cli.commands.check import register; "
               "register(app); run()"]
    ok = subprocess.run([*cmd, "check", "--baseline", str(baseline)], capture_output=True, text=True, cwd=ROOT,
                        timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == "" and len(ok.stderr.splitlines()) == 1
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    err = subprocess.run([*cmd, "check", "--baseline", str(bad)], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert err.returncode == 2 and len(err.stderr.splitlines()) == 1 and "Traceback" not in err.stderr
