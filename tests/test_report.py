"""`plan report` (HTML) and `plan explain --svg`: what each section holds, that the charts draw the numbers the cost
model computed, that the pipeline timeline stays bounded at pp = 64 with hundreds of micro-batches, and bad output
paths."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from conftest import run_plan_in_process

from planner.cost.stages import STAGE_KINDS, stage_memory_gib
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.layout import Schedule, parse_pairs
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.report import charts
from planner.report.explain import complete_layout
from planner.report.timeline_chart import HEAT_BINS, busy_bins, heat_image, ops_of, timeline_figure
from planner.search.search import price_layout, search
from planner.strategies.osdp_table import full_layout
from planner.strategies.pipeline_sim import simulate_schedule

# A problem whose top pick is pipelined (tp8 pp2 vpp4 interleaved, 64 micro-batches) and that plans in under a second.
PIPELINED = ("--model", "llama70b", "--cluster", "a100x128", "--global-batch", "512", "--framework", "megatron")
SVG_NS = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("report") / "report.html"
    r = run_plan_in_process("report", *PIPELINED, "--top", "6", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""  # the page goes to the file; the one line of chatter to stderr
    return out.read_text()


def _section(html: str, sid: str) -> str:
    start = html.index(f'<section id="{sid}">')
    return html[start:html.index("</section>", start)]


def test_report_has_every_section_with_its_content(page: str) -> None:
    inputs = _section(page, "inputs")
    for text in ("llama3-70b", "a100x128", "megatron", "512 sequences", "Pruned by rule"):
        assert text in inputs
    plans = _section(page, "plans")
    assert len(re.findall(r"<tr( class=\"top\")?><td class=\"num\">\d+</td>", plans)) == 6
    assert 'class="top"' in plans and "tp8 pp2 v4" in plans and "legend: " in plans
    for sid, gid in (("scatter", "pareto-front"), ("scatter", "top-pick"), ("breakdown", None), ("memory", None),
                     ("timeline", None)):
        sec = _section(page, sid)
        assert sec.count("<svg") == 1, sid
        assert "<figcaption>" in sec
        if gid:
            assert f'id="{gid}"' in sec
    assert "2 stages x 64 micro-batches" in _section(page, "timeline") or "interleaved" in _section(page, "timeline")


def test_report_is_self_contained(page: str) -> None:
    """Nothing is fetched when the page is viewed: no external script, stylesheet, image or font."""
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "@import" not in page and "url(http" not in page
    assert "<script src" not in page
    # Every reference outside the page would be a URL; the only ones left are XML namespace names.
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) <= {"http://www.w3.org/2000/svg",
                                                              "http://www.w3.org/1999/xlink"}


def test_report_is_deterministic(tmp_path: Path, page: str) -> None:
    out = tmp_path / "again.html"
    assert run_plan_in_process("report", *PIPELINED, "--top", "6", "-o", str(out)).returncode == 0
    assert out.read_text() == page


def test_report_without_a_pipelined_top_pick_shows_the_best_pipelined_layout(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    # (llama70b's first plan here was ZeRO-3 at pp1 until overlapped gathers began to pay for the SMs they hold)
    r = run_plan_in_process("report", "--model", "llama2-13b", "--cluster", "h100x64", "--global-batch", "256",
                            "--framework", "megatron-core", "--top", "3", "-o", str(out))
    assert r.returncode == 0, r.stderr
    page = out.read_text()
    plans = _section(page, "plans")
    assert " pp1 " in plans.split('class="top"')[1].split("</tr>")[0]
    assert "the top pick has pp = 1" in _section(page, "timeline")
    assert _section(page, "memory").count("<svg") == 1


@pytest.mark.parametrize("args, needle", [
    (("-o", "/nonexistent-dir/r.html"), "--output"),
    (("-o", "/tmp"), "--output"),
])
def test_report_bad_output_path_is_one_line_exit_2(args: tuple[str, ...], needle: str) -> None:
    r = run_plan_in_process("report", "--model", "llama70b", "--cluster", "h100x64", *args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr


def test_report_bad_problem_is_exit_2() -> None:
    r = run_plan_in_process("report", "--model", "no-such-model", "--cluster", "h100x64", "-o", "/tmp/x.html")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


# --- explain --svg --------------------------------------------------------------------------------------------------
def _svg(tmp_path: Path, layout: str) -> ET.Element:
    out = tmp_path / "layout.svg"
    r = run_plan_in_process("explain", "--model", "llama70b", "--cluster", "h100x512", "--layout", layout,
                            "--svg", str(out))
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stderr and "layout" in r.stdout  # the text report still goes to stdout
    root = ET.parse(out).getroot()  # well-formed XML
    assert root.tag == SVG_NS + "svg"
    return root


def test_explain_svg_has_timeline_and_memory(tmp_path: Path) -> None:
    root = _svg(tmp_path, "tp=8,pp=4,vpp=5,mbs=1,zero=1,recompute=selective")
    axes = [g for g in root.iter(SVG_NS + "g") if g.get("id", "").startswith("axes_")]
    assert len(axes) == 2  # the timeline's Gantt (few ops) and the memory bars
    bars = [p for p in root.iter(SVG_NS + "g") if p.get("id", "").startswith("patch_")]
    assert len(bars) >= 4 * 4  # at least four stacked kinds on each of the four stages


def test_explain_svg_dense_timeline_has_heat_strip_and_zooms(tmp_path: Path) -> None:
    root = _svg(tmp_path, "tp=8,pp=16,mbs=1,zero=1,recompute=selective")  # 16 stages x 128 micro-batches
    ids = {g.get("id") for g in root.iter() if g.get("id")}
    assert "timeline-heat" in ids
    assert len([i for i in ids if i.startswith("axes_")]) == 4  # heat strip, two zooms, memory


def test_explain_svg_without_pipeline_is_memory_only(tmp_path: Path) -> None:
    root = _svg(tmp_path, "tp=8,zero=3")
    assert len([g for g in root.iter(SVG_NS + "g") if g.get("id", "").startswith("axes_")]) == 1


def test_explain_svg_bad_path_is_exit_2() -> None:
    r = run_plan_in_process("explain", "--model", "llama70b", "--cluster", "h100x512", "--layout", "tp=8",
                            "--svg", "/nonexistent-dir/x.svg")
    assert r.returncode == 2 and "--svg" in r.stderr and len(r.stderr.strip().splitlines()) == 1


# --- the numbers behind the charts ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def problem() -> Problem:
    return Problem(load_model("llama3-70b"), load_cluster("h100x512"), TrainingSpec(seq_len=8192, global_batch=512))


@pytest.mark.parametrize("layout", ["tp=8,pp=4,mbs=1,zero=1,recompute=selective", "tp=8,pp=1,zero=3",
                                    "tp=4,pp=8,mbs=1,zero=1,recompute=full"])
def test_stage_memory_matches_evaluate_on_first_and_last_stage(problem: Problem, layout: str) -> None:
    """1F1B: the per-stage walk reproduces evaluate's first- and last-stage totals and its split of the busiest."""
    _check_stages(problem, layout)


@pytest.fixture(scope="module")
def moe() -> Problem:
    return Problem(load_model("mixtral-8x22b"), load_cluster("h100x256"), TrainingSpec(seq_len=4096, global_batch=256))


def test_stage_memory_matches_evaluate_for_moe(moe: Problem) -> None:
    """MoE: routed experts' states shard over the expert data-parallel group, as in evaluate."""
    _check_stages(moe, "tp=2,pp=8,ep=8,mbs=1,zero=1,recompute=full")


@pytest.mark.parametrize("schedule", ["dualpipe", "zb-v"])
def test_stage_memory_matches_evaluate_for_v_and_dual_schedules(moe: Problem, schedule: str) -> None:
    """ZB-V and DualPipe keep pp micro-batches in flight on every rank; DualPipe holds two stages per rank."""
    _check_stages(moe, f"tp=2,pp=8,ep=8,mbs=1,zero=1,recompute=full,schedule={schedule}")


def _check_stages(problem: Problem, layout: str) -> None:
    lay = complete_layout(problem, parse_pairs([layout], "layout"))
    met = price_layout(problem, lay)
    stages = stage_memory_gib(problem, lay.as_dict())
    assert len(stages) == lay.pp
    # the same per-stage sum (allocations.stage_memories) and device total (device_memory.device_bytes): the same bits
    assert stages[0]["total"] == met["mem_first_stage_gib"]
    if lay.pp > 1:  # with one stage there is no separate last stage to compare
        assert stages[-1]["total"] == met["mem_last_stage_gib"]
    busiest = max(stages, key=lambda s: s["total"])
    assert busiest["total"] == met["memory_peak_gib"]
    for kind in ("weights", "grads", "optimizer", "activations", "logits", "buffers"):
        assert busiest[kind] == met[f"mem_{kind}_gib"]
    assert all(s["total"] == pytest.approx(sum(s[k] for k in STAGE_KINDS)) for s in stages)
    if lay.pp > 2 and lay.schedule == Schedule.ONE_F_ONE_B:  # 1F1B's warm-up depth falls with the rank
        mids = [s["activations"] for s in stages[:-1]]
        assert mids == sorted(mids, reverse=True) and mids[0] > mids[-1]


def test_time_terms_add_up_to_the_step(problem: Problem) -> None:
    for layout in ("tp=8,pp=4,vpp=5,mbs=1,zero=1,recompute=selective", "tp=4,cp=2,zero=3,recompute=full"):
        met = price_layout(problem, complete_layout(problem, parse_pairs([layout], "layout")))
        terms = charts.time_terms(met)
        assert min(terms.values()) >= 0
        assert terms["other"] == pytest.approx(0.0, abs=1e-9 * met["step_time_s"])
        assert sum(terms.values()) == pytest.approx(met["step_time_s"], rel=1e-9)


def test_search_keeps_every_priced_layout_and_front_is_pareto(problem: Problem) -> None:
    result = search(problem, top=3, keep_priced=True)
    priced = result.priced
    assert priced is not None and len(priced["tp"]) == result.feasible
    fastest = result.fastest or result.plans[0]  # (#1 may be a preferred layout priced within the tie)
    assert priced["tokens_per_s_per_gpu"].max() == pytest.approx(fastest.metrics["tokens_per_s_per_gpu"])
    assert search(problem, top=3).priced is None  # the plain search keeps nothing extra
    mem, tput = priced["memory_peak_gib"], priced["tokens_per_s_per_gpu"]
    front = charts.pareto_front(mem, tput)
    on = np.zeros(len(mem), bool)
    on[front] = True
    for i in front:  # nothing strictly better on both axes
        assert not np.any((mem <= mem[i]) & (tput > tput[i]))
    rest = np.flatnonzero(~on)[:2000]
    for j in rest:  # everything else is matched or beaten by a front point
        assert np.any((mem[front] <= mem[j]) & (tput[front] >= tput[j]))
    fam = charts.families(priced)
    assert set(fam) >= {"TP+PP+DP"} and all("+" in f or f in ("TP", "PP", "CP", "EP", "DP", "single GPU")
                                             for f in set(fam))
    kept = charts.thin(mem, tput, fam)
    assert 0 < len(kept) <= len(mem) and len(kept) <= charts.SCATTER_GRID[0] * charts.SCATTER_GRID[1] * len(set(fam))


# --- the timeline at depth -----------------------------------------------------------------------------------------
def test_busy_bins_conserve_each_rank_busy_time() -> None:
    sim = simulate_schedule("zb-h1", 8, 32, t_f=1.0, t_b=1.0, t_w=0.6, t_comm=0.05)
    ops = ops_of(sim)
    busy = busy_bins(ops, sim.p, float(ops.end.max()), 97)
    assert busy.sum(axis=(0, 2)) == pytest.approx(sim.busy, rel=1e-9)
    span = float(ops.end.max()) / 97
    assert busy.sum(axis=0).max() <= span * (1 + 1e-9)  # a rank runs one op at a time


def test_timeline_at_pp64_with_256_microbatches_stays_readable_and_bounded() -> None:
    sim = simulate_schedule(Schedule.INTERLEAVED.label, 64, 256, t_f=0.02, t_b=0.04, v=2, t_comm=0.0002)
    assert len(sim.timeline) == 64 * 256 * 2 * 2  # 65,536 ops: far too many to draw one by one
    ops = ops_of(sim)
    span = float(ops.end.max())
    img = heat_image(ops, sim.p, span)
    assert img.shape == (64, HEAT_BINS, 3)
    idle = (img > 0.99).all(axis=2)
    # The warm-up wedge shows: the last rank is white until its first op, the first rank busy from the start.
    first_last = int(ops.start[ops.stage == 63].min() / span * HEAT_BINS)
    assert first_last > 10 and idle[-1, :first_last].all() and not idle[0, :first_last].any()
    with charts.style():
        svg = charts.to_svg(timeline_figure(sim, 256))
    assert len(svg) < 1_500_000  # bounded by the bins and the zoom windows, not by 65k ops
    root = ET.fromstring(svg)
    ids = {e.get("id") for e in root.iter() if e.get("id")}
    assert "timeline-heat" in ids and len([i for i in ids if i.startswith("axes_")]) == 3
    assert len(list(root.iter(SVG_NS + "image"))) >= 1


def test_simulation_is_capped_to_a_budget_and_the_title_says_so() -> None:
    from planner.report.html import SIM_OPS_BUDGET, sim_microbatch_cap
    from planner.report.timeline_chart import title

    base = {"tp": 8, "dp": 4, "cp": 1, "ep": 1, "mbs": 1, "zero": 1, "recompute": 0, "sp": 1, "cp_comm": 0}
    one = full_layout({**base, "pp": 64, "vpp": 1, "schedule": int(Schedule.ONE_F_ONE_B)})
    assert sim_microbatch_cap(one) * 64 * 2 <= SIM_OPS_BUDGET < (sim_microbatch_cap(one) + 1) * 64 * 2
    inter = full_layout({**base, "pp": 64, "vpp": 16, "schedule": int(Schedule.INTERLEAVED)})
    assert sim_microbatch_cap(inter) == 64  # Megatron needs a multiple of pp micro-batches: at least one round
    sim = simulate_schedule("1f1b", 4, 8, t_f=1.0, t_b=2.0)
    assert "(first 8 of 300 simulated)" in title(sim, 300) and "first" not in title(sim, 8)


def test_every_schedule_has_a_table_abbreviation_and_legend() -> None:
    """The ranked table, the report and its legend name every schedule (a missing one was an internal error)."""
    from planner.report.table import LEGEND, compact_layout

    base = {"tp": 2, "pp": 4, "dp": 8, "cp": 1, "ep": 1, "vpp": 2, "mbs": 1, "zero": 1, "recompute": 0, "sp": 1,
            "cp_comm": 0}
    for sched in Schedule:
        text, used = compact_layout(full_layout({**base, "schedule": int(sched)}))
        assert used <= set(LEGEND), sched
        assert text.split()[-1] in used
