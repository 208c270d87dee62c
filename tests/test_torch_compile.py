"""torch.compile as a recipe switch (issue 24, item 4): the eager and compiled kernel rates of the stacks that run
PyTorch's own kernels, from torchtitan's published eager/compiled pairs; the validation knob priced with it."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import run_plan_in_process

from planner.cost.profiles import COMPILE_SPEEDUP, compiled, kernel_efficiency, profile_for
from planner.evidence.cases import load_cases
from planner.evidence.recipes import default_recipes_path, load_recipes
from planner.evidence.validate import run_case
from planner.inputs.catalog import data_dir, load_cluster, load_model
from planner.inputs.layout import parse_pairs
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.report.explain import explain

# pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Llama 3.1 8B, FSDP, selective AC: Table 1 (8 H100)
# and Table 3 (128 H100), "FSDP" and "FSDP + torch.compile" rows, tokens/s/GPU.
PAIRS = ((5762, 6667), (5605, 6514))


def test_the_speedup_is_the_published_pairs() -> None:
    ratios = [on / off for off, on in PAIRS]
    assert COMPILE_SPEEDUP == pytest.approx(sum(ratios) / len(ratios))
    assert 1.15 < COMPILE_SPEEDUP < 1.17


def test_eager_kernels_run_at_the_compiled_rate_over_the_speedup() -> None:
    on = TrainingSpec(framework="torchtitan", torch_compile=True)
    off = TrainingSpec(framework="torchtitan", torch_compile=False)
    assert kernel_efficiency(on) == profile_for("torchtitan").kernel_efficiency
    assert kernel_efficiency(on) / kernel_efficiency(off) == pytest.approx(COMPILE_SPEEDUP)
    # torchtitan compiles unless told not to; the Trainer (DeepSpeed) only when told to; Megatron has no switch
    assert compiled(profile_for("torchtitan"), TrainingSpec(framework="torchtitan"))
    assert not compiled(profile_for("deepspeed"), TrainingSpec(framework="deepspeed"))
    assert not compiled(profile_for("megatron-core"), TrainingSpec(framework="megatron-core", torch_compile=True))
    mcore = TrainingSpec(framework="megatron-core")
    assert kernel_efficiency(mcore) == kernel_efficiency(mcore.model_copy(update={"torch_compile": False}))


def test_a_compute_bound_step_gains_nearly_the_speedup() -> None:
    """Table 1's own layout (llama3-8b, 8 H100, FSDP, local batch 2, selective AC): the compiled step is faster by
    at most the kernel ratio, and by most of it since the step is mostly kernels."""
    def step(flag: bool) -> float:
        problem = Problem(load_model("llama3-8b"), load_cluster("h100x8"),
                          TrainingSpec(seq_len=8192, global_batch=16, framework="torchtitan", torch_compile=flag))
        return explain(problem, parse_pairs(["tp=1,pp=1,dp=8,mbs=2,zero=3,recompute=selective"], "--layout"))[
            "metrics"]["step_time_s"]

    ratio = step(False) / step(True)
    assert 1.10 < ratio <= COMPILE_SPEEDUP + 1e-9


def test_validation_prices_the_runs_compile_knob() -> None:
    """TT-001 is the eager FSDP row: its knob (torch_compile false) is priced, and the same case compiled is faster."""
    cases = {c["id"]: c for c in load_cases(str(data_dir("validation") / "published_runs.yaml"))}
    recipes = load_recipes(default_recipes_path(None))
    eager = run_case(cases["TT-001"], "test", recipes)
    assert eager["knobs"]["torch_compile"]["status"] == "priced" and eager["knobs"]["torch_compile"]["value"] is False
    case = copy.deepcopy(cases["TT-001"])
    case["ran"] = {"torch_compile": {"value": True, "source": "pytorch/torchtitan@b5bcd76c6:x.md#L1"}}
    on = run_case(case, "test", recipes)
    gain = on["predicted"]["tokens_per_s_per_gpu"] / eager["predicted"]["tokens_per_s_per_gpu"]
    assert 1.10 < gain <= COMPILE_SPEEDUP + 1e-9


def test_the_switch_is_refused_where_the_stack_has_none() -> None:
    proc = run_plan_in_process("--model", "llama3-8b", "--cluster", "h100x8", "--framework", "megatron-core",
                               "--torch-compile", "on")
    assert proc.returncode == 2 and "--torch-compile" in proc.stderr
    proc = run_plan_in_process("--model", "llama3-8b", "--cluster", "h100x8", "--framework", "torchtitan",
                               "--torch-compile", "maybe")
    assert proc.returncode == 2 and "on or off" in proc.stderr


def test_a_plan_that_compiles_prices_the_compiled_loss() -> None:
    """torchtitan's TOML as the planner writes it compiles the model and the loss (`components = ["model", "loss"]`),
    so a compiled plan's logits take the compiled loss's 4 bytes per logit and an eager one the eager fp32
    cross-entropy's 12: a third of the memory, on Table 1's layout; the plan document read back prices the same."""
    from cli.options import problem_for
    from cli.plan_options import PlanOptions
    from planner.cost.memory import COMPILED_LOSS_BYTES
    from planner.report.plan_doc import problem_from_document

    def logits(flag: str | None) -> tuple[float, Problem]:
        options = PlanOptions(model="llama3-8b", cluster="h100x8", framework="torchtitan", seq_len=8192,
                              global_batch=16, torch_compile=flag)
        problem = problem_for(load_model("llama3-8b"), load_cluster("h100x8"), options)
        out = explain(problem, parse_pairs(["tp=1,pp=1,dp=8,mbs=2,zero=3,recompute=selective"], "--layout"))
        return out["breakdown"]["memory_gib"]["logits"], problem

    (on, problem), (off, _) = logits(None), logits("off")
    assert problem.compiled_loss
    assert on / off == pytest.approx(COMPILED_LOSS_BYTES / profile_for("torchtitan").loss_bytes_per_logit, rel=1e-3)
    proc = run_plan_in_process("--model", "llama3-8b", "--cluster", "h100x8", "--framework", "torchtitan",
                               "--global-batch", "16", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert problem_from_document(json.loads(proc.stdout)).compiled_loss


def test_the_knob_with_the_loss_in_scope_prices_speed_and_loss_memory() -> None:
    """TT-032 compiled the model and the loss (scope [model, loss]): under torchtitan the knob is priced, both the
    kernel rate and the compiled loss's memory; the same knob on a stack whose compiled speed has no published pair
    (llm-foundry) prices only the loss's memory and says so (approximate)."""
    from planner.evidence.recipes import apply_knobs, case_knobs

    cases = {c["id"]: c for c in load_cases(str(data_dir("validation") / "published_runs.yaml"))}
    recipes = load_recipes(default_recipes_path(None))
    ran = run_case(cases["TT-032"], "test", recipes)
    assert ran["knobs"]["torch_compile"]["status"] == "priced"
    block = {"value": True, "source": "test", "scope": ["model", "loss"]}
    for framework, status in (("torchtitan", "priced"), ("llm-foundry", "approximate")):
        problem = Problem(load_model("llama3-8b"), load_cluster("h100x8"),
                          TrainingSpec(seq_len=8192, global_batch=16, framework=framework))
        knobs = {k: v for k, v in case_knobs({"training": {}, "layout": {}}, {"ran": {"torch_compile": block}},
                                              problem).items() if k == "torch_compile"}
        assert knobs["torch_compile"]["status"] == status
        applied, _ = apply_knobs(problem, knobs)
        assert applied.compiled_loss and applied.training.torch_compile is True
        assert compiled(profile_for(framework), applied.training) is (framework == "torchtitan")
