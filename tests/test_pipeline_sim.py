"""Pipeline schedules simulated op by op (planner/cost/pipeline_sim.py) against the papers' bubble and memory numbers,
the closed forms in planner/cost/pipeline.py, and the measured ordering of the Zero Bubble paper's runs."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from planner.cost import pipeline as closed
from planner.inputs.layout import SCHEDULES
from planner.report.timeline import render_timeline
from planner.strategies.pipeline_ops import segment_factor
from planner.strategies.pipeline_orders import Op
from planner.strategies.pipeline_sim import simulate_orders, simulate_schedule

PUBLISHED = Path("/work/shared/validation/published_runs.yaml")


# --- 1F1B: Narayanan et al. 2021 §2.2.1 -------------------------------------------------------------------------
@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("m_mult", [0.5, 1, 2, 3])
def test_1f1b_bubble_and_inflight(p, m_mult):
    m = max(1, int(p * m_mult))
    r = simulate_schedule("1f1b", p, m, t_f=1.0, t_b=2.0)
    assert r.bubble == (p - 1) * (1.0 + 2.0)
    assert r.peak_inflight[0] == min(m, p)
    assert r.busy[0] == m * 3.0


# --- interleaved 1F1B: Narayanan et al. 2021 §2.2.2, Megatron warm-up, cost_model.md §2.3 ------------------------
@pytest.mark.parametrize("p,v,m", [(2, 2, 4), (4, 2, 8), (4, 3, 16), (8, 2, 16), (8, 4, 32)])
def test_interleaved_bubble_and_warmup_memory(p, v, m):
    r = simulate_schedule("interleaved", p, m, t_f=1.0, t_b=2.0, v=v)
    assert r.bubble == pytest.approx((p - 1) * 3.0 / v, rel=1e-12)
    warmup_plus_one = (p - 1) * 2 + (v - 1) * p + 1  # chunk-micro-batches on rank 0 at its peak
    assert r.peak_inflight[0] == warmup_plus_one
    # In units of full micro-batches of L/p layers, relative to 1F1B's p: the Korthikanti / Megatron penalty.
    assert r.peak_activations[0] / p == pytest.approx(1 + (p - 1) / (p * v))


def test_interleaved_needs_m_multiple_of_p():
    with pytest.raises(ValueError, match="m % p"):
        simulate_schedule("interleaved", 4, 6, t_f=1.0, t_b=2.0, v=2)


# --- zero bubble handcrafted schedules: Qi et al. 2024 §2 ---------------------------------------------------------
@pytest.mark.parametrize("p,m", [(4, 8), (4, 12), (8, 16), (8, 24)])
def test_zb_h1_third_of_1f1b_bubble_same_memory(p, m):
    base = simulate_schedule("1f1b", p, m, t_f=1.0, t_b=1.0, t_w=1.0)
    r = simulate_schedule("zb-h1", p, m, t_f=1.0, t_b=1.0, t_w=1.0)
    assert r.bubble == pytest.approx((p - 1) * 1.0)
    assert r.bubble == pytest.approx(base.bubble / 3)
    assert r.peak_inflight[0] == base.peak_inflight[0]
    assert max(r.peak_inflight) <= base.peak_inflight[0] + 1e-12


@pytest.mark.parametrize("p,m", [(4, 8), (4, 12), (8, 16), (8, 24)])
def test_zb_h2_no_bubble_at_most_2p_minus_1_in_flight(p, m):
    h1 = simulate_schedule("zb-h1", p, m, t_f=1.0, t_b=1.0, t_w=1.0)
    r = simulate_schedule("zb-h2", p, m, t_f=1.0, t_b=1.0, t_w=1.0)
    assert r.bubble == pytest.approx(0.0, abs=1e-9)
    assert r.bubble < h1.bubble
    assert max(r.peak_inflight) <= 2 * p - 1 + 1e-12
    assert r.peak_inflight[0] == min(m, 2 * p - 1)


@pytest.mark.parametrize("times", [(1.0, 1.0, 1.0), (1.0, 1.0, 0.5), (1.0, 1.2, 0.6), (1.0, 0.8, 0.9), (1.0, 2.0, 1.0)])
@pytest.mark.parametrize("p,m", [(4, 8), (8, 24)])
def test_simulation_matches_closed_forms(times, p, m):
    """Without p2p latency the timeline reproduces schedule.py's closed forms (whose t_b is the full backward)."""
    t_f, t_b, t_w = times
    for name in ("1f1b", "interleaved", "zb-h1", "zb-h2"):  # the schedules schedule.py has closed forms for
        v = 2 if name == "interleaved" else 1
        r = simulate_schedule(name, p, m, t_f=t_f, t_b=t_b, t_w=t_w, v=v)
        code = np.array([SCHEDULES.index(name)])
        want = closed.bubble_time(code, np.array([p]), np.array([v]), np.array([t_f]), np.array([t_b + t_w]),
                                  np.array([t_w]))[0]
        assert r.bubble == pytest.approx(want, abs=1e-9), name
        inflight = closed.inflight_microbatches(code, np.array([p]), np.array([v]), np.array([m]))[0]
        assert r.peak_activations[0] == pytest.approx(inflight), name


# --- ZB-V: Qi et al. 2024 §6 / zero-bubble repo README ------------------------------------------------------------
@pytest.mark.parametrize("p,m", [(4, 8), (4, 16), (8, 32)])
def test_zb_v_beats_zb_h1_with_1f1b_memory(p, m):
    base = simulate_schedule("1f1b", p, m, t_f=1.0, t_b=1.0, t_w=1.0)
    h1 = simulate_schedule("zb-h1", p, m, t_f=1.0, t_b=1.0, t_w=1.0)
    r = simulate_schedule("zb-v", p, m, t_f=1.0, t_b=1.0, t_w=1.0)
    assert r.v == 2
    assert r.bubble < h1.bubble  # with the ZB memory model (W keeps 32/34 of M_B) a small tail bubble remains
    assert max(r.peak_activations) <= base.peak_activations[0] + 1e-12
    # When W holds little memory the greedy V order reaches the README's zero bubble.
    free_w = simulate_schedule("zb-v", p, m, t_f=1.0, t_b=1.0, t_w=1.0, w_share=0.0)
    assert free_w.bubble == pytest.approx(0.0, abs=1e-9)


# --- Seq1F1B: Sun et al. 2024, arXiv 2406.03488 -------------------------------------------------------------------
def test_segment_factor_sums_to_one_and_grows():
    for k in (1, 2, 3, 4, 8):
        f = [segment_factor(j, k, 0.4) for j in range(k)]
        assert sum(f) == pytest.approx(1.0)
        assert f == sorted(f)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_seq1f1b_smaller_bubble_and_about_1_over_k_memory(k):
    p, m = 8, 8
    base = simulate_schedule("1f1b", p, m, t_f=1.0, t_b=1.0, t_w=1.0)
    r = simulate_schedule("seq1f1b", p, m, t_f=1.0, t_b=1.0, t_w=1.0, k=k, attn_frac=0.3)
    assert r.busy[0] == pytest.approx(base.busy[0])  # same total work
    assert r.bubble < base.bubble
    ratio = r.peak_activations[0] / base.peak_activations[0]
    assert ratio == pytest.approx((p + k - 1) / (k * p))  # p+k-1 segments of 1/k vs p whole sequences
    assert ratio < 1 / k + 1 / p
    # Equal segments (no attention imbalance): the 1F1B bubble shrinks exactly k-fold.
    even = simulate_schedule("seq1f1b", p, m, t_f=1.0, t_b=1.0, t_w=1.0, k=k, attn_frac=0.0)
    assert even.bubble == pytest.approx(base.bubble / k)


# --- engine properties --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,kw", [("1f1b", {}), ("interleaved", {"v": 2}), ("zb-h1", {}), ("zb-h2", {}),
                                     ("zb-v", {}), ("seq1f1b", {"k": 3, "attn_frac": 0.3})])
@pytest.mark.parametrize("blocking", [False, True])
def test_timeline_is_feasible(name, kw, blocking):
    p, m, comm = 4, 8, 0.3
    r = simulate_schedule(name, p, m, t_f=1.0, t_b=1.1, t_w=0.7, t_comm=comm, p2p_blocking=blocking, **kw)
    by_stage: dict[int, list] = {}
    end = {}
    for x in r.timeline:
        by_stage.setdefault(x.stage, []).append(x)
        end[(x.op, x.microbatch, x.chunk, x.segment, x.stage)] = x.end
    for slots in by_stage.values():  # one op at a time per rank
        slots.sort(key=lambda x: x.start)
        assert all(a.end <= b.start + 1e-9 for a, b in itertools.pairwise(slots))
    for x in r.timeline:  # W after its own B; F after the previous rank's F (+ p2p); B after the next rank's B
        if x.op == "W":
            assert x.start >= end[("B", x.microbatch, x.chunk, x.segment, x.stage)] - 1e-9
            continue
        down = -1 if (name == "zb-v" and x.chunk == 1) else 1  # direction the forward travels for this chunk
        other = x.stage - down if x.op == "F" else x.stage + down
        if 0 <= other < p:
            assert x.start >= end[(x.op, x.microbatch, x.chunk, x.segment, other)] + comm - 1e-9
    n_ops = (3 if name.startswith("zb") else 2) * m * r.v * r.k
    assert len(r.timeline) == p * n_ops


def test_deadlocked_order_is_reported():
    with pytest.raises(ValueError, match="deadlock"):
        simulate_orders([[Op("B", 0), Op("F", 0)]], schedule="bad", m=1, t_f=1.0, t_b=1.0)


def test_render_timeline_shape():
    r = simulate_schedule("interleaved", 4, 8, t_f=1.0, t_b=2.0, v=2)
    text = render_timeline(r, width=80)
    lines = text.splitlines()
    assert len(lines) == 1 + 4 and lines[0].startswith("interleaved")
    for s, row in enumerate(lines[1:]):
        body = row.split("|")[1]
        assert row.startswith(f"s{s}") and len(body) == 80
        assert set(body) <= set("FBWfbw.")
    assert lines[1].split("|")[1][0] == "F" and "." in lines[4]


# --- Zero Bubble paper (Qi et al. 2024, Tables 3/4/6): predicted vs measured throughput order --------------------
def _kendall_tau_b(x: list[float], y: list[float]) -> float:
    conc = disc = tie_x = tie_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        a = (x[i] > x[j]) - (x[i] < x[j])
        b = (y[i] > y[j]) - (y[i] < y[j])
        if a == 0 and b == 0:
            continue
        if a == 0:
            tie_x += 1
        elif b == 0:
            tie_y += 1
        elif a == b:
            conc += 1
        else:
            disc += 1
    return (conc - disc) / math.sqrt((conc + disc + tie_x) * (conc + disc + tie_y))


def _zb_groups() -> dict[tuple[str, int], list[dict]]:
    cases = yaml.safe_load(PUBLISHED.read_text())["cases"]
    groups: dict[tuple[str, int], list[dict]] = {}
    for c in cases:
        if c["id"].startswith("ZB-"):
            groups.setdefault((c["model"]["name"], c["training"]["global_batch"]), []).append(c)
    return groups


@pytest.mark.skipif(not PUBLISHED.exists(), reason="shared validation data not mounted")
def test_zero_bubble_paper_throughput_order():
    groups = _zb_groups()
    assert sum(len(g) for g in groups.values()) == 48
    rows = []
    for (name, gbs), cases in groups.items():
        c0 = cases[0]
        t = {k: float(v) for k, v in re.findall(r"(T_F|T_B|T_W|T_comm)=([\d.]+)", c0["note"])}
        p, dp = c0["layout"]["pp"], c0["layout"]["dp"]
        assert dp == 1
        m = gbs // c0["training"]["micro_batch"]
        # 1F1B-I runs one transformer layer per chunk; the ZB repo pads to k*p - 2 layers so the first/last stages
        # absorb embedding and LM head (cost_model.md §4), i.e. (layers + 2) / p chunks per rank.
        v = (c0["model"]["num_hidden_layers"] + 2) // p
        measured = [c["measured"]["tokens_per_s_per_gpu"] for c in cases]
        taus = []
        for blocking in (True, False):
            pred = []
            for c in cases:
                sched = c["layout"]["schedule"]
                r = simulate_schedule(sched, p, m, t_f=t["T_F"], t_b=t["T_B"], t_w=t["T_W"], t_comm=t["T_comm"],
                                      v=v if sched == "interleaved" else 1, p2p_blocking=blocking)
                pred.append(1.0 / r.makespan)
            taus.append(_kendall_tau_b(pred, measured))
            if blocking:
                speedup = [x / pred[0] for x in pred]
        rows.append((name, gbs, p, m, v, [c["layout"]["schedule"] for c in cases], speedup,
                     [x / measured[0] for x in measured], *taus))
    print("\nmodel      gbs   p    m  v  predicted speed-up vs 1F1B (blocking p2p) | measured          "
          "| tau(blocking) tau(latency only)")
    for name, gbs, p, m, v, scheds, sp, meas, tau_blk, tau_lat in rows:
        print(f"{name:9s} {gbs:4d} {p:3d} {m:4d} {v:2d}  "
              + " ".join(f"{s}={x:.3f}" for s, x in zip(scheds, sp, strict=True)) + " | "
              + " ".join(f"{x:.3f}" for x in meas) + f" | {tau_blk:5.2f} {tau_lat:5.2f}")
    for name, gbs, *_, tau_blk, tau_lat in rows:
        assert tau_blk >= 0.66, (name, gbs, tau_blk)
        assert tau_lat >= 0.66, (name, gbs, tau_lat)


# --- interleaved in-flight count: Megatron-Core schedules.py get_pp_rank_microbatches -----------------------------
def test_interleaved_inflight_follows_megatron_warmup():
    code = np.array([SCHEDULES.index("interleaved")])

    def inflight(p: int, v: int, m: int, rank: int = 0) -> float:
        return closed.inflight_microbatches(code, np.array([p]), np.array([v]), np.array([m]), rank)[0]

    # p=4, v=2, m=8: warm-up 2*3 + 1*4 = 10 chunk-forwards, +1 = 11 chunks = 5.5 micro-batches
    assert closed.interleaved_inflight_chunks(np.array([4]), np.array([2]), np.array([8]))[0] == 11
    assert inflight(4, 2, 8) == pytest.approx(5.5)
    # uncapped (m v >= p v + p - 1) it is Korthikanti's p (1 + (p-1)/(p v)); at m = p the m v cap binds
    for p, v, m in [(4, 2, 8), (8, 4, 32), (4, 3, 16), (8, 2, 16)]:
        assert inflight(p, v, m) == pytest.approx(p * (1 + (p - 1) / (p * v)))
    assert inflight(4, 2, 4) == pytest.approx(4.0) and inflight(4, 2, 4) < 4 * (1 + 3 / 8)


@pytest.mark.parametrize("p,v,m", [(4, 2, 4), (4, 2, 8), (8, 4, 8), (8, 2, 16), (4, 3, 4), (2, 2, 2)])
def test_interleaved_inflight_matches_simulated_peak(p, v, m):
    r = simulate_schedule("interleaved", p, m, t_f=1.0, t_b=2.0, v=v)
    code = np.array([SCHEDULES.index("interleaved")])
    for rank in range(p):
        want = closed.inflight_microbatches(code, np.array([p]), np.array([v]), np.array([m]), rank)[0]
        assert r.peak_activations[rank] == pytest.approx(want), rank


@pytest.mark.parametrize("name", ["1f1b"])
def test_rank_inflight_matches_simulated_peak(name):
    p, m = 8, 16
    r = simulate_schedule(name, p, m, t_f=1.0, t_b=1.0, t_w=1.0, w_share=1.0)
    code = np.array([SCHEDULES.index(name)])
    for rank in range(p):
        want = closed.inflight_microbatches(code, np.array([p]), np.array([1]), np.array([m]), rank)[0]
        assert r.peak_inflight[rank] == pytest.approx(want), (name, rank)
