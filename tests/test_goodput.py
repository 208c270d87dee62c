"""The goodput model (planner.cost.goodput): its equations against numbers worked by hand, Llama 3 405B against the
published effective training time, and the cluster file's reliability: and storage: sections."""

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from cli.options import build_problem
from cli.plan_options import PlanOptions
from planner.cost import goodput as gp
from planner.errors import PlanInputError
from planner.inputs.catalog import load_cluster
from planner.inputs.resilience import ReliabilitySpec, StorageSpec

ROOT = Path(__file__).resolve().parents[1]


def _problem(cluster: str = "h100x16384", batch: int = 2048):
    return build_problem(PlanOptions(model="llama3-405b", cluster=cluster, global_batch=batch))


def _with(problem, reliability: dict | None = None, storage: dict | None = None):
    cluster = problem.cluster.model_copy(update={
        "reliability": ReliabilitySpec(**(reliability or {})), "storage": StorageSpec(**(storage or {}))})
    return replace(problem, cluster=cluster)


def test_default_rate_is_llama3s_unexpected_interruptions():
    """419 interruptions / (16,384 GPUs x 54 days x 24 h) = 419 / 21,233,664 = 1.9733e-5 per GPU-hour; the job's
    MTBF 3600 / (1.9733e-5 x 16,384) = 11,134 s = 3.09 h ("one failure every three hours")."""
    assert gp.FAILURES_PER_GPU_HOUR == pytest.approx(1.9733e-5, rel=1e-4)
    assert gp.mtbf_s(gp.FAILURES_PER_GPU_HOUR, 16_384) == pytest.approx(11_134, rel=1e-3)
    assert gp.mtbf_s(0.0, 16_384) == math.inf


def test_daly_interval_by_hand():
    """delta = 2 s, M = 10,000 s: sqrt(2 x 2 x 10,000) = 200; delta / 2M = 1e-4, sqrt = 0.01;
    200 x (1 + 0.01 / 3 + 1e-4 / 9) - 2 = 200 x 1.0033444 - 2 = 198.669 s (Young alone: 200 s). A checkpoint that
    costs at least 2M gives M."""
    assert gp.daly_interval_s(2.0, 10_000.0) == pytest.approx(198.669, abs=1e-3)
    assert gp.daly_interval_s(30_000.0, 10_000.0) == 10_000.0


def test_daly_factors_by_hand():
    """tau = 198 s, delta = 2 s, R = 600 s, M = 10,000 s: restart e^-0.06 = 0.941765; checkpoints 198 / 200 = 0.99;
    x = 200 / 10,000 = 0.02, x / (e^x - 1) = 0.02 / 0.0202013 = 0.990033; goodput 0.941765 x 0.99 x 0.990033 =
    0.923055. An asynchronous write of 100 s in flight multiplies by e^-0.01 = 0.990050."""
    f = gp.daly_factors(198.0, 2.0, 600.0, 0.0, 10_000.0)
    assert f["restart"] == pytest.approx(0.941765, abs=1e-6)
    assert f["checkpoints"] == pytest.approx(0.99)
    assert f["lost_work"] == pytest.approx(0.990033, abs=1e-6)
    assert math.prod(f.values()) == pytest.approx(0.923055, abs=1e-6)
    exposed = gp.daly_factors(198.0, 2.0, 600.0, 100.0, 10_000.0)
    assert exposed["lost_work"] / f["lost_work"] == pytest.approx(0.990050, abs=1e-6)
    shares = gp.loss_shares(f)
    assert sum(shares.values()) == pytest.approx(1 - 0.923055, abs=1e-6)
    assert max(shares, key=shares.get) == "restart"


def test_transfer_takes_the_smaller_of_link_and_share():
    """0.5 GB per GPU, 1,000 GPUs on 1,000 GB/s of storage with 12.5 GB/s links: the share (1 GB/s) binds, 0.5 s;
    on 100,000 GB/s the link (12.5 GB/s) binds, 0.04 s."""
    assert gp.transfer_s(0.5e9, 12.5, 1_000.0, 1_000) == pytest.approx(0.5)
    assert gp.transfer_s(0.5e9, 12.5, 100_000.0, 1_000) == pytest.approx(0.04)


def test_checkpoint_bytes_are_the_unique_state_over_the_gpus():
    """Llama 3 405B: 405,853,388,800 parameters x (2 bf16 weight + 12 fp32 master and Adam moments) bytes / 16,384 GPUs
    = 346,798,556 bytes; bf16 moments save 4 bytes per parameter: x 10 / 14."""
    p = _problem()
    assert gp.checkpoint_bytes_per_gpu(p) == pytest.approx(346_798_556, rel=1e-6)
    lean = replace(p, training=p.training.model_copy(update={"optimizer_moments": "bf16"}))
    assert gp.checkpoint_bytes_per_gpu(lean) == pytest.approx(346_798_556 * 10 / 14, rel=1e-6)


def test_llama3_405b_on_16k_h100_is_within_a_few_points_of_the_published_90_percent():
    """Meta's layout (TP8 PP16 DP128) steps in ~5.9 s here; the report kept "> 90 % effective training time" over
    466 interruptions in 54 days (Llama 3 report, section 3.3.4). The default rate, storage and restart give:
    M = 11,134 s; 0.347 GB per GPU at 2,000 GB/s / 16,384 = 0.122 GB/s: 2.84 s per checkpoint; Daly's interval
    ~250 s = 43 steps; restart 600 + 2.84 s; goodput e^-(602.8/11,134) x ... = ~92.6 %, the restart the largest
    loss (~5 %). The test holds it to the published figure: above 90 % and not more than 5 points above it."""
    p = _problem()
    g = gp.goodput(p, 5.86)
    assert 0.90 < g.goodput < 0.95
    assert g.interval_steps == pytest.approx(250 / 5.86, abs=2)
    assert g.write_s == pytest.approx(2.84, abs=0.01) and g.restart_s == pytest.approx(602.84, abs=0.01)
    assert max(g.loss, key=g.loss.get) == "restart"
    assert g.goodput + sum(g.loss.values()) == pytest.approx(1.0)


def test_goodput_falls_with_scale_and_rises_with_faster_restarts():
    step = 5.0
    kept = [gp.goodput(_problem(f"h100x{n}"), step).goodput for n in (1024, 8192, 16384, 65536, 98304)]
    assert kept == sorted(kept, reverse=True) and kept[0] > 0.95 and kept[-1] < 0.8
    p = _problem()
    assert gp.goodput(_with(p, {"restart_s": 60}), step).goodput > gp.goodput(p, step).goodput + 0.04
    assert gp.goodput(_with(p, {"failures_per_gpu_hour": 0.0}), step).goodput == 1.0


def test_async_save_stalls_for_the_host_copy_and_waits_for_the_write():
    """Asynchronous: the stall is 0.347 GB over the 64 GB/s host link = 5.4 ms; on 20 GB/s of storage for 16,384
    GPUs a write takes 0.347 / 0.00122 = 284 s, so saves are at least 284 s apart and a failure during one loses
    ~284 s more."""
    p = _with(_problem(), storage={"write_gbps": 20.0, "async_save": True})
    g = gp.goodput(p, 5.0)
    assert g.stall_s == pytest.approx(0.3468 / 64, rel=1e-3)
    assert g.write_s == pytest.approx(0.3468 / (20 / 16_384), rel=1e-3)
    assert g.interval_s >= g.write_s and g.lost_work_s >= g.write_s
    sync = gp.goodput(_with(_problem(), storage={"write_gbps": 20.0}), 5.0)
    assert sync.stall_s == sync.write_s and g.goodput > sync.goodput


def test_cluster_file_sections_read_and_checked(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("gpu: h100\nnodes: 2048\nreliability:\n  failures_per_gpu_hour: 4e-5\n  restart_s: 120\n"
                    "storage:\n  write_gbps: 1000\n  per_gpu_gbps: 25\n  async_save: true\n")
    c = load_cluster(str(path))
    assert c.reliability.failures_per_gpu_hour == 4e-5 and c.reliability.restart_s == 120
    assert c.storage.write_gbps == 1000 and c.storage.read_gbps is None and c.storage.async_save
    old = load_cluster("h100x512")  # no sections: every default
    assert old.reliability == ReliabilitySpec() and old.storage == StorageSpec()
    for bad, field in (("reliability:\n  restart_s: -1\n", "reliability.restart_s"),
                       ("storage:\n  async_save: 1\n", "storage.async_save"),
                       ("storage:\n  write_gbps: true\n", "storage.write_gbps"),
                       ("storage: 5\n", "storage")):
        path.write_text("gpu: h100\nnodes: 8\n" + bad)
        with pytest.raises(PlanInputError) as err:
            load_cluster(str(path))
        assert err.value.field == field, bad


def test_cli_json_carries_goodput_and_unknown_section_keys_warn(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("gpu: h100\nnodes: 8\nreliability:\n  restart_secs: 60\n")
    done = subprocess.run([sys.executable, "-m", "cli.main", "--model", "llama3-8b", "--cluster", str(path),
                           "--format", "json", "--top", "2"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "restart_secs" in done.stderr and "restart_s" in done.stderr  # unknown key, with a did-you-mean
    doc = json.loads(done.stdout)
    assert doc["schema_version"] == 10
    g = doc["plans"][0]["goodput"]
    assert 0 < g["goodput"] <= 1 and g["interval_steps"] >= 1 and g["relaunch_s"] == gp.RESTART_S
    assert g["tokens_per_s_per_gpu"] == pytest.approx(doc["plans"][0]["metrics"]["tokens_per_s_per_gpu"]
                                                      * g["goodput"], rel=1e-4)
    assert doc["inputs"]["cluster"]["reliability"] == {"failures_per_gpu_hour": None, "restart_s": None}
