"""The training section of a plan document (inputs.training) as the launchers read it: each recipe field checked,
one PlanInputError naming the field for a bad value."""

from __future__ import annotations

from planner.errors import PlanInputError
from planner.inputs.specs import FP8_RECIPES, GRAPH_MODULES


def offload(training: dict) -> float:
    """optimizer_offload: the share of optimizer states in host memory."""
    value = training.get("optimizer_offload", 0.0) if isinstance(training, dict) else 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise PlanInputError(f"expected a share from 0 to 1, got {value!r:.60}",
                             field="inputs.training.optimizer_offload", fix="e.g. optimizer_offload: 0.5")
    return float(value)


def _choice(training: dict, key: str, choices: tuple[str, ...], example: str) -> str:
    """One of `choices` for `key`; the first (the default) where the document leaves the key out."""
    value = training.get(key, choices[0]) if isinstance(training, dict) else choices[0]
    if value not in choices:
        named = f"{', '.join(choices[:-1])} or {choices[-1]}"
        raise PlanInputError(f"expected {named}, got {value!r:.60}", field=f"inputs.training.{key}",
                             fix=f"e.g. {key}: {example}")
    return str(value)


def optimizer(training: dict) -> str:
    """optimizer: adam or muon (documents before schema 10: adam)."""
    return _choice(training, "optimizer", ("adam", "muon"), "muon")


def moments(training: dict) -> str:
    """optimizer_moments: fp32 or bf16."""
    return _choice(training, "optimizer_moments", ("fp32", "bf16"), "bf16")


def fp8_recipe(training: dict) -> str:
    """fp8_recipe: tensorwise or blockwise."""
    return _choice(training, "fp8_recipe", FP8_RECIPES, "blockwise")


def token_drop(training: dict) -> tuple[float | None, bool]:
    """(moe_capacity_factor, moe_pad_to_capacity): None for dropless."""
    capacity = training.get("moe_capacity_factor") if isinstance(training, dict) else None
    padded = training.get("moe_pad_to_capacity", False) if isinstance(training, dict) else False
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int | float) or capacity <= 0):
        raise PlanInputError(f"expected a positive number or null, got {capacity!r:.60}",
                             field="inputs.training.moe_capacity_factor", fix="e.g. moe_capacity_factor: 1.0")
    if not isinstance(padded, bool) or (padded and capacity is None):
        raise PlanInputError(f"expected true with a capacity factor, or false; got {padded!r:.60}",
                             field="inputs.training.moe_pad_to_capacity", fix="e.g. moe_pad_to_capacity: false")
    return (None if capacity is None else float(capacity)), padded


def switch(training: dict, key: str) -> bool:
    """An on/off recipe switch of the training (None, as in a document from before it existed: off)."""
    value = training.get(key) if isinstance(training, dict) else None
    if value is not None and not isinstance(value, bool):
        raise PlanInputError(f"expected true, false or null, got {value!r:.60}", field=f"inputs.training.{key}",
                             fix=f"e.g. {key}: true")
    return bool(value)


def attention_kernel(training: dict) -> str:
    """attention_kernel: stack (the framework's fused attention), unfused (a fallback the software takes by itself)
    or fp8 (Transformer Engine's fp8 attention, a switch the launch file has to set); documents before it: stack."""
    return _choice(training, "attention_kernel", ("stack", "unfused", "fp8"), "fp8")


def dispatcher(training: dict) -> str:
    """moe_dispatcher: stack (the framework's), alltoall or flex; documents before the field say stack."""
    return _choice(training, "moe_dispatcher", ("stack", "alltoall", "flex"), "alltoall")


def graphs(training: dict) -> tuple[str, tuple[str, ...] | None]:
    """(cuda_graphs, cuda_graph_modules): none | per-layer | full-iteration, and the captured modules (None: whole
    layers, a dropless MoE layer's attention, router and dispatch preprocessing). Documents before the fields: none."""
    scope = _choice(training, "cuda_graphs", ("none", "per-layer", "full-iteration"), "per-layer")
    modules = training.get("cuda_graph_modules") if isinstance(training, dict) else None
    if modules is not None and (not isinstance(modules, list | tuple) or not all(m in GRAPH_MODULES for m in modules)):
        raise PlanInputError(f"expected null or a list of {', '.join(GRAPH_MODULES)}, got {modules!r:.60}",
                             field="inputs.training.cuda_graph_modules", fix="e.g. cuda_graph_modules: [attn]")
    return scope, (None if modules is None else tuple(modules))
