"""The one plan-document reader (planner.report.plan_doc) and the one --compress check (planner.inputs.problem)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_plan_in_process

from planner.errors import PlanInputError
from planner.inputs.layout import Zero
from planner.inputs.problem import COMPRESS_DIMENSIONS, parse_compress
from planner.report.plan_doc import plan_document, read_options, read_plan_document


def test_hsdp_baseline_passes_check(tmp_path: Path) -> None:
    """Bug: a baseline recorded with --fix zero=hsdp stores zero 4 and `plan check` refused it as out of range."""
    r = run_plan_in_process("--model", "llama70b", "--cluster", "h100x256", "--fix", "zero=hsdp", "--framework",
                            "generic", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["inputs"]["options"]["fix"] == {"zero": 4}  # what plan writes today, unchanged
    path = tmp_path / "b.json"
    path.write_text(r.stdout)
    checked = run_plan_in_process("check", "--baseline", str(path))
    assert checked.returncode == 0, checked.stderr
    assert read_plan_document(str(path)).options().fix == {"zero": Zero.HSDP}


@pytest.mark.parametrize(("value", "code"), [(4, Zero.HSDP), ("hsdp", Zero.HSDP), (3, Zero.PARAMETERS), ("1", 1)])
def test_zero_is_read_through_the_typed_layout(value: object, code: int) -> None:
    assert read_options({"fix": {"zero": value}, "top": 1}).fix == {"zero": code}


@pytest.mark.parametrize(("key", "value"), [("zero", 5), ("recompute", 5), ("schedule", -1), ("tp", 0), ("sp", 2)])
def test_out_of_range_knob_is_one_error(key: str, value: int) -> None:
    with pytest.raises(PlanInputError, match="out of range") as err:
        read_options({"fix": {key: value}, "top": 1}, "b.json")
    assert err.value.field == f"inputs.options.fix.{key}"


def test_reader_refuses_a_foreign_mapping() -> None:
    with pytest.raises(PlanInputError, match="not a plan document"):
        plan_document({"hello": 1})


def test_compress_dimensions_match_the_cost_model() -> None:
    from planner.cost.fabric import DIMENSIONS

    assert set(COMPRESS_DIMENSIONS) == set(DIMENSIONS)


@pytest.mark.parametrize("raw", [["dp=4,tp=1.5"], {"dp": 4, "tp": 1.5}])
def test_compress_cli_and_document_forms_agree(raw: object) -> None:
    assert parse_compress(raw) == {"dp": 4.0, "tp": 1.5}


@pytest.mark.parametrize("raw", [["dp=0.5"], {"dp": 0.5}, ["dp=2000"], {"dp": 2000}, ["xx=2"], {"xx": 2}, ["dp=a"],
                                 {"dp": "a"}, {"dp": True}, {"dp": float("nan")}])
def test_compress_limits_are_the_same_everywhere(raw: object) -> None:
    with pytest.raises(PlanInputError):
        parse_compress(raw, "--compress" if isinstance(raw, list) else "inputs.options.compress")


def test_compress_bad_ratio_is_exit_2() -> None:
    r = run_plan_in_process("--model", "llama3-8b", "--cluster", "h100x16", "--compress", "dp=0.5")
    assert r.returncode == 2 and "between 1 and 1000" in r.stderr and len(r.stderr.splitlines()) == 1
