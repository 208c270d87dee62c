"""The fitted constants: one data file (planner/cost/fitted.yaml) that the cost model prices with and the fit script
(bench/fit_profiles.py) writes; and the dead code the refactoring removed stays removed."""

import datetime
import importlib.util
import shutil
import statistics
from dataclasses import replace
from functools import cache
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest
import yaml

from planner.cost import expert, fitted, host
from planner.cost.profiles import PROFILE_NAMES, profile_for
from planner.evidence.recipes import default_recipes_path, load_recipes, priced_stack
from planner.evidence.validate import load_cases, run_case, short_source
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec

ROOT = Path(__file__).resolve().parents[1]
DOC = yaml.safe_load(fitted.FITTED_FILE.read_text(encoding="utf-8"))
KERNEL = DOC["kernel_efficiency"]
MOE = DOC["moe"]
FITTED_PROFILES = [name for name, e in KERNEL["profiles"].items() if "borrowed_from" not in e]


def _fit_script():
    spec = importlib.util.spec_from_file_location("fit_profiles", ROOT / "bench" / "fit_profiles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def _cases_by_id() -> dict[str, dict]:
    return {c["id"]: c for c in load_cases(None)}


def _kernel_value(name: str) -> float:
    entry = KERNEL["profiles"][name]
    return KERNEL["profiles"][entry.get("borrowed_from", name)]["value"]


# --- the cost model prices with the file ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(KERNEL["profiles"]))
def test_profiles_take_their_kernel_efficiency_from_the_file(name: str) -> None:
    assert profile_for(name).kernel_efficiency == _kernel_value(name)


def test_moe_constants_come_from_the_file() -> None:
    dropless = TrainingSpec(seq_len=4096, global_batch=512)
    assert expert.busiest_rank_load(dropless) == MOE["expert_imbalance"]["value"]
    problem = Problem(load_model("mixtral-8x7b"), load_cluster("h100x8"), dropless)
    ep = np.array([8.0])
    shipped = host.layer_host_time(problem, ep, router_fused=False, deepep=False).fwd[0]
    with fitted.using(replace(fitted.shipped(), host_op_s=2 * MOE["host_op_s"]["value"])):
        doubled = host.layer_host_time(problem, ep, router_fused=False, deepep=False).fwd[0]
    assert doubled == pytest.approx(2 * shipped)  # host time is counted ops x the file's time per op


def test_using_swaps_the_values_and_restores_them_even_on_error() -> None:
    shipped = fitted.shipped()
    other = replace(shipped, expert_imbalance=1.1,
                    kernel_efficiency=MappingProxyType({**shipped.kernel_efficiency, "nemo": 0.5}))
    dropless = TrainingSpec(seq_len=4096, global_batch=512)
    with pytest.raises(RuntimeError), fitted.using(other):
        assert profile_for("nemo").kernel_efficiency == 0.5
        assert expert.busiest_rank_load(dropless) == 1.1
        raise RuntimeError
    assert fitted.current() is shipped
    assert profile_for("nemo").kernel_efficiency == _kernel_value("nemo")
    assert expert.busiest_rank_load(dropless) == MOE["expert_imbalance"]["value"]


def test_a_profile_without_an_entry_is_named_and_priced_at_mamf() -> None:
    """Every entry names a real profile; the profiles without one (no published run to fit, none borrowed) price
    their kernels at MAMF itself, as the profiles module says."""
    assert set(KERNEL["profiles"]) <= set(PROFILE_NAMES)
    for name in set(PROFILE_NAMES) - set(KERNEL["profiles"]):
        assert profile_for(name).kernel_efficiency == 1.0


# --- every entry says what it is, lands in its range and names its cases --------------------------------------------
def _assert_described(entry: dict) -> None:
    assert isinstance(entry["unit"], str) and entry["unit"]
    assert len(entry["meaning"]) > 40 and len(entry["range_source"]) > 40
    low, high = entry["range"]
    assert low < high


def _assert_fit_fields(entry: dict, cases: list[dict]) -> None:
    assert isinstance(entry["date"], datetime.date)
    score = entry["score"]
    assert 0 <= score["median_abs_log_error"] < 0.5
    assert score["loso_sources"] == len({short_source(c) for c in cases})
    if score["loso_sources"] > 1:
        assert score["loso_median_abs_log_error"] >= 0
    else:
        assert score["loso_median_abs_log_error"] is None
    assert entry["refit"]["median_abs_log_error"] <= score["median_abs_log_error"]  # the grid's best is no worse
    assert entry["fitted_on"] == sorted(c["id"] for c in cases)


@pytest.mark.parametrize("name", FITTED_PROFILES)
def test_kernel_entries_are_complete_in_range_and_name_their_cases(name: str) -> None:
    _assert_described(KERNEL)
    assert isinstance(KERNEL["method"], str)
    entry = KERNEL["profiles"][name]
    low, high = KERNEL["range"]
    assert low <= entry["value"] <= high
    by_id = _cases_by_id()
    cases = [by_id[i] for i in entry["fitted_on"]]
    assert all(c["tier"] == "dense" and c["measured"]["tokens_per_s_per_gpu"] for c in cases)
    # the profile validate prices each with: its recipe's stack, else what its row reads as
    recipes = load_recipes(default_recipes_path(None))
    assert all(priced_stack(c, recipes) == name for c in cases)
    _assert_fit_fields(entry, cases)


def test_borrowed_entries_name_a_fitted_lender_and_why() -> None:
    borrowed = {n: e for n, e in KERNEL["profiles"].items() if "borrowed_from" in e}
    assert borrowed
    for entry in borrowed.values():
        assert entry["borrowed_from"] in FITTED_PROFILES and len(entry["why"]) > 20 and "value" not in entry


def test_moe_entries_are_complete_in_range_and_name_their_cases() -> None:
    for key in ("expert_imbalance", "host_op_s"):
        _assert_described(MOE[key])
        low, high = MOE[key]["range"]
        assert low <= MOE[key]["value"] <= high
    by_id = _cases_by_id()
    cases = [by_id[i] for i in MOE["fitted_on"]]
    assert all(c["tier"] == "moe" for c in cases)
    _assert_fit_fields(MOE, cases)


# --- the fit script writes the file, and only when asked --------------------------------------------------------------
def test_the_shipped_file_is_exactly_what_the_fit_script_writes() -> None:
    fit = _fit_script()
    text = fitted.FITTED_FILE.read_text(encoding="utf-8")
    assert fit.render(yaml.safe_load(text), fit.header(text)) == text


def test_fit_script_prints_a_diff_and_writes_only_with_write(tmp_path: Path) -> None:
    fit = _fit_script()
    path = tmp_path / "fitted.yaml"
    shutil.copy(fitted.FITTED_FILE, path)
    before = path.read_bytes()
    args = ["--file", str(path), "--only", "kernel", "--profiles", "megatron", "--grid", "0.8,0.825",
            "--max-cases", "3"]
    printed: list[str] = []
    assert fit.main(args, out=printed.append) == 0
    assert path.read_bytes() == before  # no --write: nothing written
    assert printed[0].startswith(f"--- {path}") and "fitted_on: [N21-001, N21-002, N21-003]" in printed[0]

    assert fit.main([*args, "--write"], out=printed.append) == 0
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    entry = doc["kernel_efficiency"]["profiles"]["megatron"]
    assert entry["value"] == KERNEL["profiles"]["megatron"]["value"]  # values are kept without --adopt
    assert entry["fitted_on"] == ["N21-001", "N21-002", "N21-003"] and entry["date"] == datetime.date.today()
    assert doc["kernel_efficiency"]["profiles"]["nemo"] == KERNEL["profiles"]["nemo"]  # only what was fitted
    assert doc["moe"] == MOE
    # The score at the kept value, recomputed here case by case.
    by_id = _cases_by_id()
    errs = [abs(np.log(run_case(by_id[i], "fit")["predicted"]["tokens_per_s_per_gpu"]
                       / by_id[i]["measured"]["tokens_per_s_per_gpu"])) for i in entry["fitted_on"]]
    assert entry["score"]["median_abs_log_error"] == round(statistics.median(errs), 4)
    assert entry["refit"]["value"] in (0.8, 0.825)
    assert fitted.read(path).kernel_efficiency == fitted.shipped().kernel_efficiency

    assert fit.main([*args, "--write", "--adopt"], out=printed.append) == 0
    assert fitted.read(path).kernel_efficiency["megatron"] == entry["refit"]["value"]
    adopted = yaml.safe_load(path.read_text(encoding="utf-8"))["kernel_efficiency"]["profiles"]["megatron"]
    assert adopted["score"]["median_abs_log_error"] == adopted["refit"]["median_abs_log_error"]  # scored at the value


def test_fit_script_reproduces_the_stored_fit_on_a_cut_grid(tmp_path: Path) -> None:
    """Refit megatron on the stored value and its upper neighbour: the same cases and the same score at the value."""
    fit = _fit_script()
    path = tmp_path / "fitted.yaml"
    shutil.copy(fitted.FITTED_FILE, path)
    stored = KERNEL["profiles"]["megatron"]
    grid = f"{stored['value']},{stored['value'] + 0.025}"
    assert fit.main(["--file", str(path), "--only", "kernel", "--profiles", "megatron", "--grid", grid, "--write"],
                    out=lambda _: None) == 0
    entry = yaml.safe_load(path.read_text(encoding="utf-8"))["kernel_efficiency"]["profiles"]["megatron"]
    assert entry["fitted_on"] == stored["fitted_on"]
    assert entry["score"]["median_abs_log_error"] == stored["score"]["median_abs_log_error"]
    assert entry["score"]["loso_sources"] == stored["score"]["loso_sources"]


# --- dead code stays dead ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("module", "name"), [
    ("planner.inputs.layout", "ZERO_STAGES"),
    ("cli.option_types", "FwOpt"),
    ("planner.cost.module_offload", "_ATTENTION_KINDS"),
    ("planner.report.launchers.megatron", "_ATTENTION_KINDS"),
    ("planner.cost.expert", "EXPERT_IMBALANCE"),
    ("planner.cost.expert", "MOE_HOST_OVERHEAD_S"),
    ("planner.cost.profiles", "PROFILES"),
    ("planner.strategies.pipeline_ops", "causal_attention_share"),
    ("planner.strategies.pipeline_ops", "zb_w_share"),
])
def test_removed_names_are_gone(module: str, name: str) -> None:
    assert not hasattr(importlib.import_module(module), name)


def test_removed_members_and_modules_are_gone() -> None:
    from planner.inputs.layout import Recompute
    from planner.strategies.osdp import OsdpPlan

    assert not hasattr(Recompute, "from_label")
    assert not hasattr(OsdpPlan, "sharded_layers")
    assert importlib.util.find_spec("planner.cost.gemm") is None


def test_attention_kinds_have_one_definition() -> None:
    from planner.cost import module_offload
    from planner.inputs import specs
    from planner.report.launchers import megatron

    assert module_offload.ATTENTION_KINDS is specs.ATTENTION_KINDS is megatron.ATTENTION_KINDS
    hits = [p for p in (ROOT / "planner").rglob("*.py")
            if '("full_attention", "sliding_attention", "chunked_attention")' in p.read_text(encoding="utf-8")]
    assert hits == [ROOT / "planner" / "inputs" / "specs.py"]


def test_each_kernel_fit_rests_on_the_dense_cases_validate_prices_with_its_profile() -> None:
    """The fit and the scoreboard agree on which profile prices a case: every dense case validate scores under a
    fitted profile (its knob file `stack`, else its row as read) is in that profile's fitted_on, and nothing else.
    The ZeRO-3 rows of Narayanan et al. ran DeepSpeed and are fitted with megatron-deepspeed, not paper-era Megatron."""
    from planner.evidence.validate import validate

    scored: dict[str, set[str]] = {}
    for r in validate()["cases"]:
        if r.get("tier") == "dense" and (r.get("error") or {}).get("throughput") is not None \
                and r["measured"].get("tokens_per_s_per_gpu"):
            scored.setdefault(r["regime"]["stack"], set()).add(r["id"])
    for name in FITTED_PROFILES:
        assert set(KERNEL["profiles"][name]["fitted_on"]) == scored.get(name, set()), name
    assert {"N21-013", "N21-016"} <= set(KERNEL["profiles"]["megatron-deepspeed"]["fitted_on"])
