"""Memory accuracy gate: the median error of predicted peak memory (live tensors) on the published runs."""

from planner.validate import validate


def test_memory_median_error_under_target():
    report = validate()
    mem = report["summary"]["groups"]["all"]["memory"]
    assert mem["cases"] >= 50
    assert mem["median_ape"] <= 0.10
    moe = report["summary"]["groups"]["tier:moe"]["throughput"]
    assert moe["median_ape"] <= 0.15
