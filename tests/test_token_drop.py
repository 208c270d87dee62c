"""Token dropping (issue 12 item 2, dropless vs capacity factor): what a capacity factor and padding change in the
price, checked against Megatron-Core's own definitions (moe_utils.get_capacity, the alltoall dispatcher's
drop_and_pad path) and against Megatron-Bridge's token-drop runs."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import layout
from pydantic import ValidationError

from planner.cost import compute, expert, fitted, flops, memory
from planner.cost.profiles import profile_for
from planner.evidence.cases import case_token_drop
from planner.evidence.validate import case_problem, load_cases
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.layout import Recompute, Schedule
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.search.search import price_layout

ROOT = Path(__file__).resolve().parents[1]


def _training(capacity: float | None = None, padded: bool = False, **kw: object) -> TrainingSpec:
    return TrainingSpec(seq_len=4096, global_batch=1024, moe_capacity_factor=capacity, moe_pad_to_capacity=padded,
                        **kw)


def test_busiest_rank_load_by_drop_policy() -> None:
    imbalance = fitted.current().expert_imbalance
    assert expert.busiest_rank_load(_training()) == imbalance  # dropless: the busiest rank computes all it gets
    assert expert.busiest_rank_load(_training(1.0)) == 1.0  # capped at its capacity, the excess dropped
    assert expert.busiest_rank_load(_training(2.0)) == imbalance  # a loose cap drops nothing
    assert expert.busiest_rank_load(_training(2.0, True)) == 2.0  # padded: every expert does a full capacity
    assert expert.routed_memory_load(_training(2.0, True)) == 2.0
    assert expert.routed_memory_load(_training(1.0)) == expert.routed_memory_load(_training()) == 1.0


def test_padding_needs_a_capacity_factor_as_megatron_core_asserts() -> None:
    with pytest.raises(ValidationError, match="moe_pad_to_capacity needs moe_capacity_factor"):
        _training(None, True)
    with pytest.raises(ValidationError):
        _training(0.0)


def test_token_drop_runs_on_the_plain_alltoall_dispatcher() -> None:
    generic = profile_for("generic")
    assert generic.deepep and generic.fp8_dispatch
    dropping = expert.dispatcher_profile(generic, _training(1.0, True))
    assert not dropping.deepep and not dropping.fp8_dispatch
    assert expert.dispatcher_profile(generic, _training()) is generic


def test_padded_capacity_prices_a_full_capacity_of_routed_gemms() -> None:
    """Padding to capacity c: the routed-expert GEMMs of a MoE layer cost c times the even share, so going from
    c = 1 to c = 2 adds exactly one even share: tok·f_moe·routed / (grouped-GEMM rate·depth rate·peak·eff)."""
    m, cl = load_model("qwen3-30b-a3b"), load_cluster("h100x64")
    tok, one, ep = np.array([4096.0]), np.array([1.0]), np.array([8.0])

    def gemm(capacity: float) -> float:
        p = Problem(m, cl, _training(capacity, True))
        return float(compute.gemm_time(p, compute.rates(p), tok, one, ep)[0])

    r = compute.rates(Problem(m, cl, _training()))
    half = expert.gemm_depth_half(cl.gpu, _training().precision)  # H100 BF16: 250 (half H800's FP8 rate per SM)
    rate = expert.grouped_gemm_rate(m, tok, one, ep)[0] * expert.expert_depth_rate(m, tok, one, ep, half)[0]
    share = 4096.0 * compute.moe_fraction(m) * flops.routed_flops(m) / rate
    assert gemm(2.0) - gemm(1.0) == pytest.approx(share / (r.peak * r.eff), rel=1e-6)


def test_padded_capacity_keeps_capacity_sized_buffers() -> None:
    p1, p2 = (Problem(load_model("qwen3-30b-a3b"), load_cluster("h100x64"), _training(c, True)) for c in (1.0, 2.0))
    tp, sp, rc = np.array([1.0]), np.array([0]), np.array([int(Recompute.NONE)])
    a1, a2 = (memory.activation_bytes_per_token(p, tp, sp, rc)[0] for p in (p1, p2))
    assert a2 > 1.3 * a1  # the routed copies' saved tensors double; attention and norms do not


def test_bridge_token_drop_rows_are_read_as_its_recipe() -> None:
    """Megatron-Bridge labels token-drop rows "(tokendrop)"; its --use_tokendrop applies capacity factor 1.0 with
    padding. An explicit training.moe_capacity_factor wins over the label."""
    rows = [c for c in load_cases(None) if "tokendrop" in str(c["model"]).lower()]
    assert rows
    for case in rows:
        capacity, padded, note = case_token_drop(case)
        assert (capacity, padded) == (1.0, True) and "tokendrop" in note
        tr = case_problem(case, "published_runs.yaml").training
        assert (tr.moe_capacity_factor, tr.moe_pad_to_capacity) == (1.0, True)
    stated = replace_training(rows[0], moe_capacity_factor=1.25)
    assert case_token_drop(stated) == (1.25, False, None)
    dropless = [c for c in load_cases(None) if c["tier"] == "moe" and "tokendrop" not in str(c["model"]).lower()]
    assert case_token_drop(dropless[0]) == (None, False, None)


def replace_training(case: dict, **values: object) -> dict:
    return {**case, "training": {**case["training"], **values}}


def test_dropping_to_capacity_prices_the_alltoall_dispatcher_slower_across_nodes() -> None:
    """Qwen3-235B on 256 H100 (EP 32 over 4 nodes): with token drop the plain alltoall sends every routed copy
    across the network, where DeepEP sends a token once per node. The expert GEMMs compute one even share either way
    (capacity 1.0 padded; dropless with the router forced to balance, as the benchmark rows run it), so the compute
    differs only by the two dispatchers' kernels and the host ops that issue them (padded: 15 eager ops a layer;
    DeepEP's: 10 and one host sync, planner.cost.host), which stay under a tenth of it."""
    m, cl = load_model("qwen3-235b-a22b"), load_cluster("h100x256")
    lay = layout(tp=2, pp=8, dp=16, ep=32, vpp=4, sp=1, zero=1, schedule=int(Schedule.INTERLEAVED))
    dropless = price_layout(Problem(m, cl, _training(precision="fp8", moe_force_balance=True)), lay)
    dropping = price_layout(Problem(m, cl, _training(1.0, True, precision="fp8")), lay)
    assert dropping["ep_comm_s"] > 1.5 * dropless["ep_comm_s"]
    assert dropping["compute_s"] == pytest.approx(dropless["compute_s"], rel=0.10)
    tok, tp, ep = np.array([4096.0]), np.array([2.0]), np.array([32.0])
    rate = compute.rates(Problem(m, cl, _training(precision="fp8")))
    blocks = [expert.moe_block_time(m, t, tok, tp, ep, rate.peak * rate.eff, rate.hbm, 0.0)
              for t in (_training(precision="fp8", moe_force_balance=True), _training(1.0, True, precision="fp8"))]
    assert blocks[0] == pytest.approx(blocks[1], rel=1e-9)  # the expert GEMMs: one even share either way


def test_token_drop_knobs_change_nothing_on_dense_models() -> None:
    p = Problem(load_model("llama3-8b"), load_cluster("h100x8"), _training(1.0, True))
    q = replace(p, training=_training())
    tok, one = np.array([8192.0]), np.array([1.0])
    assert compute.gemm_time(p, compute.rates(p), tok, one, one) == compute.gemm_time(q, compute.rates(q), tok, one,
                                                                                          one)


def _plan(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300)


QWEN = ("--model", "qwen3-30b-a3b", "--cluster", "h100x64", "--seq-len", "4096", "--global-batch", "512")


@pytest.mark.parametrize(("args", "field"), [
    (("--moe-pad-to-capacity",), "--moe-pad-to-capacity"),
    (("--moe-capacity-factor", "1", "--framework", "torchtitan"), "--moe-capacity-factor"),
])
def test_bad_token_drop_options_are_one_line_errors(args: tuple[str, ...], field: str) -> None:
    r = _plan(*QWEN, *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith(f"error: {field}:")


@pytest.mark.parametrize("fmt", ["megatron", "nemo"])
def test_token_drop_launches_and_reads_back(fmt: str, tmp_path: Path) -> None:
    """The capacity factor and padding reach the launch file (Megatron-LM flags, Megatron-Bridge overrides on the
    alltoall dispatcher), and `explain --from` reads the same token-drop recipe back."""
    r = _plan(*QWEN, "--moe-capacity-factor", "1.25", "--moe-pad-to-capacity", "--format", fmt)
    assert r.returncode == 0, r.stderr
    expected = {"megatron": ("--moe-expert-capacity-factor 1.25", "--moe-pad-expert-input-to-capacity",
                             "--moe-token-dispatcher-type alltoall"),
                "nemo": ("model.moe_expert_capacity_factor=1.25", "model.moe_pad_expert_input_to_capacity=true",
                         "model.moe_token_dispatcher_type=alltoall")}[fmt]
    assert all(e in r.stdout for e in expected), r.stdout
    path = tmp_path / ("launch.sh" if fmt == "megatron" else "launch.txt")
    path.write_text(r.stdout)
    back = _plan("explain", "--from", str(path), "--format", "json")
    assert back.returncode == 0, back.stderr
    training = json.loads(back.stdout)["inputs"]["training"]
    assert (training["moe_capacity_factor"], training["moe_pad_to_capacity"]) == (1.25, True)


def test_plan_json_keeps_the_drop_policy_for_plan_check(tmp_path: Path) -> None:
    r = _plan(*QWEN, "--moe-capacity-factor", "1.0", "--format", "json", "--top", "1")
    doc = json.loads(r.stdout)
    assert doc["inputs"]["training"]["moe_capacity_factor"] == 1.0
    path = tmp_path / "plan.json"
    path.write_text(r.stdout)
    check = _plan("check", "--baseline", str(path))  # re-plans the recorded problem, token drop included
    assert check.returncode == 0, check.stderr
