"""The fused MoE router (Megatron-Core --moe-router-fusion): what a run states wins over the stack's default, the
host prices fewer ops for it, launch files carry it both ways, and the published rows whose recipes turn it on are
priced with it (validation/case_recipes.yaml)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import run_plan_in_process

from planner.cost import host
from planner.cost.fitted import current
from planner.evidence.recipes import default_recipes_path, load_recipes
from planner.evidence.validate import load_cases
from planner.inputs.catalog import load_cluster, load_model
from planner.inputs.launch_readers import read_launch_file
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec

ROOT = Path(__file__).resolve().parents[1]
EP8 = np.array([8.0])


def _problem(framework: str, fused: bool | None = None) -> Problem:
    return Problem(load_model("qwen3-30b-a3b"), load_cluster("h100x16"),
                   TrainingSpec(seq_len=4096, global_batch=512, framework=framework, moe_router_fusion=fused))


@pytest.mark.parametrize(("framework", "default"), [("nemo", True), ("generic", True), ("megatron-core", False)])
def test_a_stated_switch_wins_over_the_stacks_default(framework: str, default: bool) -> None:
    assert host.router_fused(_problem(framework)) is default
    assert host.router_fused(_problem(framework, not default)) is (not default)


def test_the_fused_router_issues_fewer_host_ops() -> None:
    p = _problem("megatron-core")
    fused = host.layer_host_time(p, EP8, router_fused=True, deepep=False)
    unfused = host.layer_host_time(p, EP8, router_fused=False, deepep=False)
    saved = (host.ROUTER.ops - host.ROUTER_FUSED.ops) * current().host_op_s  # 13 eager ops on an x86 host
    assert unfused.fwd[0] - fused.fwd[0] == pytest.approx(saved, rel=1e-9)
    assert unfused.bwd[0] - fused.bwd[0] == pytest.approx(host.BACKWARD_OVER_FORWARD * saved, rel=1e-9)
    assert host.moe_extra_kernels(p, True, False) < host.moe_extra_kernels(p, False, False)


def test_megatron_scripts_are_read_as_they_run() -> None:
    """NVIDIA's DeepSeek-V3 GB200 reproduce guide passes --moe-router-fusion; the Megatron-FSDP DeepSeek-V3 sbatch
    script does not, and Megatron's store_true leaves it off."""
    guide = ROOT / "tests/data/launch_files/megatron/deepseek-v3-gb200-reproduce-guide.md"
    sbatch = ROOT / "tests/data/launch_files/megatron/sbatch_mfsdp_deepseek_v3.sh"
    assert read_launch_file(str(guide)).moe_router_fusion is True
    assert read_launch_file(str(sbatch)).moe_router_fusion is False


@pytest.mark.parametrize(("fmt", "framework", "switch", "needle"), [
    ("megatron", "megatron-core", "on", "--moe-router-fusion"),
    ("nemo", "nemo", "off", "model.moe_router_fusion=false"),
    ("nemo", "nemo", None, "model.moe_router_fusion=true"),
])
def test_launchers_write_the_switch_and_read_it_back(tmp_path, fmt: str, framework: str, switch: str | None,
                                                     needle: str) -> None:
    args = ["--model", "qwen3-30b-a3b", "--cluster", "h100x16", "--framework", framework, "--format", fmt]
    proc = run_plan_in_process(*args, *(("--moe-router-fusion", switch) if switch else ()))
    assert proc.returncode == 0, proc.stderr
    assert needle in proc.stdout
    path = tmp_path / ("launch.sh" if fmt == "megatron" else "overrides.txt")
    path.write_text(proc.stdout)
    assert read_launch_file(str(path), dialect=fmt).moe_router_fusion is (switch != "off")


def test_the_default_megatron_launch_leaves_the_router_unfused() -> None:
    proc = run_plan_in_process("--model", "qwen3-30b-a3b", "--cluster", "h100x16", "--framework", "megatron-core",
                               "--format", "megatron")
    assert proc.returncode == 0, proc.stderr
    assert "--moe-router-fusion" not in proc.stdout


def test_switch_refused_where_the_stack_routes_with_its_own_code() -> None:
    proc = run_plan_in_process("--model", "qwen3-30b-a3b", "--cluster", "h100x16", "--framework", "torchtitan",
                               "--moe-router-fusion", "on")
    assert proc.returncode == 2 and "--moe-router-fusion" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_plan_in_process("--model", "qwen3-30b-a3b", "--cluster", "h100x16", "--moe-router-fusion", "yes")
    assert proc.returncode == 2 and "--moe-router-fusion" in proc.stderr


def test_published_rows_carry_the_switch_their_recipes_set() -> None:
    """Megatron-Bridge's performance scripts fuse the router for every MoE model of their tables; each such row says
    so with the source line, and none is left to a default."""
    recipes = load_recipes(default_recipes_path(None))
    moe_bridge = [c for c in load_cases(None) if c["id"].startswith("MB-") and c["tier"] in ("moe", "special")
                  and (c["model"].get("num_local_experts") or 0) > 1]
    stated = {cid: e["ran"]["moe_router_fusion"] for cid, e in recipes.items()
              if "moe_router_fusion" in e.get("ran", {})}
    assert len(stated) >= 39
    for block in stated.values():
        assert isinstance(block.get("value"), bool) and "@" in block["source"]
    assert sum(c["id"] in stated for c in moe_bridge) >= 39
