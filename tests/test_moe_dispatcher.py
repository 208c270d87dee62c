"""--moe-dispatcher: the MoE token dispatcher a run uses is a plan option, priced as validate prices a case's
knob, written by the launchers and read back from launch files (issue 25: NVIDIA's Qwen3-235B fp8 recipe ran the
alltoall dispatcher, which `--framework nemo` alone prices as DeepEP)."""

from __future__ import annotations

import json

from conftest import run_plan_in_process

from cli.options import problem_for
from cli.plan_options import PlanOptions
from planner.inputs.catalog import load_cluster, load_model

QWEN = ("--model", "qwen3-235b", "--cluster", "h100x256", "--seq-len", "4096", "--global-batch", "8192",
        "--precision", "fp8", "--framework", "nemo")
RECIPE = "tp=2,pp=8,vpp=4,ep=32,mbs=1,schedule=combined-1f1b"  # Megatron-Bridge's Qwen3-235B H100 fp8 preset


def _step(*extra: str) -> float:
    r = run_plan_in_process("explain", *QWEN, "--layout", RECIPE, "--format", "json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["metrics"]["step_time_s"]


def test_alltoall_sends_every_copy_so_the_recipe_is_slower_than_under_deepep():
    stack, alltoall, flex = _step(), _step("--moe-dispatcher", "alltoall"), _step("--moe-dispatcher", "flex")
    assert flex == stack  # nemo's own dispatcher is DeepEP (flex)
    assert alltoall > 1.1 * stack  # EP 32 leaves the node: every routed copy crosses the network


def test_the_option_reaches_the_training_spec():
    base = dict(model="qwen3-235b", cluster="h100x256", seq_len=4096, global_batch=8192, precision="fp8",
                framework="nemo")
    model, cluster = load_model("qwen3-235b"), load_cluster("h100x256")
    assert problem_for(model, cluster, PlanOptions(**base)).training.moe_dispatcher == "stack"
    assert problem_for(model, cluster, PlanOptions(**base, moe_dispatcher="alltoall")).training.moe_dispatcher \
        == "alltoall"


def test_launchers_write_it_and_explain_reads_it_back(tmp_path):
    r = run_plan_in_process(*QWEN, "--moe-dispatcher", "alltoall", "--format", "megatron")
    assert r.returncode == 0, r.stderr
    assert "--moe-token-dispatcher-type alltoall" in r.stdout and "deepep" not in r.stdout
    script = tmp_path / "launch.sh"
    script.write_text(r.stdout)
    back = run_plan_in_process("explain", "--from", str(script), "--model", "qwen3-235b", "--cluster", "h100x256",
                               "--framework", "nemo", "--format", "json")
    assert back.returncode == 0, back.stderr
    assert json.loads(back.stdout)["inputs"]["training"]["moe_dispatcher"] == "alltoall"
    nemo = run_plan_in_process(*QWEN, "--moe-dispatcher", "alltoall", "--format", "nemo")
    assert nemo.returncode == 0 and "moe_token_dispatcher_type=alltoall" in nemo.stdout.replace(" ", "")


def test_bad_values_are_one_line_errors():
    for extra, words in ((("--moe-dispatcher", "bogus"), "unknown MoE dispatcher"),
                         (("--moe-dispatcher", "flex", "--moe-capacity-factor", "1.0"), "alltoall dispatcher")):
        r = run_plan_in_process(*QWEN, *extra)
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
