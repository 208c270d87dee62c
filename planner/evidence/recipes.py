"""What a published run ran beyond what its row states: the knob file beside the cases (validation/case_recipes.yaml,
keyed by case id) and a case's own `ran:` block, read into the knobs `plan validate` prices and counts.

A published table leaves most cost-relevant knobs unstated (EP overlap, CUDA graphs, recomputed modules, the token
dispatcher...), and a knob defaulted silently is absorbed by whatever constant is fitted on the row. So each knob a
row leaves out is either read from the recipe that produced the row, with its source line, or marked unresolved with
the reason; never defaulted. Where the cost model has the knob the case is priced with it (`apply_knobs`); where it
has none, or prices one fixed value through the framework profile, the knob is recorded and the case counted as
resting on a knob the model does not price (README, "Validation case format").
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from planner.cost.expert import dispatcher_profile
from planner.cost.profiles import FrameworkProfile, stack_profile
from planner.errors import PlanInputError
from planner.evidence.cases import case_framework, case_token_drop
from planner.evidence.knobs import KNOB_SPECS, OPTIONAL_KNOBS, PINNED_SOURCE
from planner.inputs.catalog import data_dir, load_gpu
from planner.inputs.files import read_structured_file
from planner.inputs.launch_readers.megatron_model import layout_chunks, layout_stages
from planner.inputs.layout import EP_OVERLAP_SCHEDULES, RECOMPUTE, Schedule, encode
from planner.inputs.problem import Problem
from planner.inputs.specs import GRAPH_MODULES

DEFAULT_RECIPES = "case_recipes.yaml"
RESOLVED_STATUSES = ("stated", "priced", "assumed", "approximate", "not priced")


# Megatron-Core's selective modules the planner's `selective` prices: the memory-bound norms and activation
# functions, and MLA's up-projections (planner.cost.compute.recompute_time). Any other module (core_attn, mlp, moe,
# shared_experts) is recomputed work the planner does not price that way.
PLANNER_SELECTIVE_MODULES = frozenset({"layernorm", "moe_act", "mla_up_proj"})
# Stacks that compile the model with torch.compile when asked; Megatron-based stacks fuse with their own kernels and
# Transformer Engine, JAX stacks are compiled by XLA whatever the config says.
# Schedules that run one model chunk per rank (rules.schedule_matches_vpp).
_ONE_CHUNK_SCHEDULES = (Schedule.ONE_F_ONE_B, Schedule.ZB_H1, Schedule.ZB_H2, Schedule.SEQ1F1B, Schedule.DUALPIPE)
_COMPILING_STACKS = frozenset({"torchtitan", "llm-foundry", "automodel", "deepspeed", "metaseq", "gpt-neox"})


def default_recipes_path(cases_path: str | None) -> Path | None:
    """The knob file for a case file: `case_recipes.yaml` beside it, else the one shipped beside the published runs
    (its entries name their run's model and cluster, so they apply only to the same runs)."""
    if cases_path:
        beside = Path(cases_path).resolve().parent / DEFAULT_RECIPES
        if beside.is_file():
            return beside
    shipped = data_dir("validation") / DEFAULT_RECIPES
    return shipped if shipped.is_file() else None


def load_recipes(path: Path | None) -> dict[str, dict[str, Any]]:
    """Entries by case id; every knob block checked (one-line errors naming the case and knob)."""
    if path is None:
        return {}
    doc = read_structured_file(path)
    if not isinstance(doc, dict) or doc.get("schema_version") != 1 or not isinstance(doc.get("cases"), dict):
        raise PlanInputError("expected 'schema_version: 1' and a 'cases:' mapping keyed by case id", source=str(path),
                             fix="see docs/accuracy.md, 'Validation case format'")
    for cid, entry in doc["cases"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("ran"), dict):
            raise PlanInputError("expected a mapping with a 'ran:' block", source=f"{path}#{cid}",
                                 fix="see docs/accuracy.md, 'Validation case format'")
        check_ran(entry["ran"], f"{path}#{cid}")
    return doc["cases"]


def recipe_entry(recipes: dict[str, dict[str, Any]], case: dict[str, Any]) -> dict[str, Any] | None:
    """The knob file's entry for a case, if it describes the same run: an entry names its case's model and cluster,
    and one whose model or cluster differ from the case's (a case file reusing an id) is not applied."""
    entry = recipes.get(str(case.get("id")))
    if entry is None:
        return None
    model = case.get("model")
    name = model.get("name") if isinstance(model, dict) else model
    same = str(entry.get("model")) == str(name) and str(entry.get("cluster")) == str(case.get("cluster"))
    return entry if same else None


def recipe_stack(entry: dict[str, Any] | None, case: dict[str, Any]) -> str | None:
    """The stack that ran the row where its recipe names one (the `stack` knob; a case's own `ran:` block wins)."""
    ran = dict((entry or {}).get("ran") or {})
    if isinstance(case.get("ran"), dict):
        ran.update(case["ran"])
    block = ran.get("stack")
    return block["value"] if isinstance(block, dict) and "value" in block else None


def priced_stack(case: dict[str, Any], recipes: dict[str, dict[str, Any]] | None) -> str:
    """The profile validate prices a case with: its recipe's stack where it names one, else what its row reads as
    (case_framework: an unknown framework is `other`, paper-era Megatron stating fp8 or CP is megatron-core)."""
    return recipe_stack(recipe_entry(recipes or {}, case), case) or case_framework(case)[0]


def codebase_schedules(knobs: dict[str, dict[str, Any]]) -> tuple[Schedule, ...] | None:
    """The schedules the run's codebase ships, where its recipe says (the `schedules` knob), else None."""
    block = knobs.get("schedules")
    if not block or block.get("status") != "priced":
        return None
    return tuple(Schedule(encode("schedule", label, "ran.schedules")[1]) for label in block["value"])


def check_ran(ran: dict[str, Any], where: str) -> None:
    """Each knob is a known name with {value, source} (a legal value, a pinned source) or {unresolved: reason}."""
    for knob, block in ran.items():
        spec = KNOB_SPECS.get(knob)
        field = f"ran.{knob}"
        if spec is None:
            raise PlanInputError(f"unknown knob '{knob}'", source=where, field=field,
                                 fix=f"use one of {', '.join(KNOB_SPECS)}")
        if not isinstance(block, dict):
            raise PlanInputError("expected {value, source} or {unresolved: reason}", source=where, field=field,
                                 fix="e.g. {value: true, source: 'owner/repo@abc1234:path#L10'}")
        if "unresolved" in block:
            if not str(block["unresolved"] or "").strip():
                raise PlanInputError("an unresolved knob needs its reason", source=where, field=field,
                                     fix="say why the recipe does not give it")
            continue
        if not spec.legal(block.get("value")):
            raise PlanInputError(f"value {block.get('value')!r} is not {spec.values}", source=where, field=field,
                                 fix=f"use {spec.values}, or unresolved: <reason>")
        if not PINNED_SOURCE.search(str(block.get("source") or "")):
            raise PlanInputError("a resolved value needs a source pinned to a commit", source=where,
                                 field=f"{field}.source", fix="cite owner/repo@<commit>:path#Lx-Ly")
    _check_layout_mtp(ran, where)


def _check_layout_mtp(ran: dict[str, Any], where: str) -> None:
    """A stated pipeline layout places as many MTP layers (m) as the run trained: Megatron-Core asserts it
    (pipeline_parallel_layer_layout.py validate_layer_layout), so a layout with m needs the mtp_layers knob."""
    layout, mtp = ran.get("pipeline_layout"), ran.get("mtp_layers")
    if not isinstance(layout, dict) or "value" not in layout:
        return
    placed = sum(stage.count("m") for stage in layout_stages(layout["value"]))
    trained = mtp.get("value") if isinstance(mtp, dict) else None
    if placed and trained is None:
        raise PlanInputError(f"the pipeline layout places {placed} MTP layer(s) and no mtp_layers is given",
                             source=where, field="ran.mtp_layers",
                             fix=f"add mtp_layers: {{value: {placed}, source: ...}} from the recipe")
    if trained is not None and trained != placed:
        raise PlanInputError(f"mtp_layers {trained} but the pipeline layout places {placed} MTP layer(s)",
                             source=where, field="ran.mtp_layers", fix="make the layout's m count match")


def _stated(case: dict[str, Any]) -> dict[str, Any]:
    """The knobs the row itself states (null = not stated)."""
    lay, tr = case.get("layout") or {}, case.get("training") or {}
    stated = {"sequence_parallel": lay.get("sequence_parallel"), "recompute": lay.get("recompute"),
              "vpp": lay.get("vpp"), "micro_batch": tr.get("micro_batch"), "zero": lay.get("zero")}
    if lay.get("schedule") is not None:
        stated["ep_overlap"] = lay["schedule"]
        schedule = Schedule(encode("schedule", str(lay["schedule"]), "layout.schedule")[1])
        if schedule in _ONE_CHUNK_SCHEDULES and stated.get("vpp") is None:
            stated["vpp"] = 1  # the schedule runs one model chunk per pipeline rank
    capacity = case_token_drop(case)[0]
    if capacity is not None:
        stated["moe_token_drop"] = capacity
    return {k: v for k, v in stated.items() if v is not None}


def relevant_knobs(case: dict[str, Any], problem: Problem) -> tuple[str, ...]:
    """The knobs that change this run's cost: MoE ones where experts are split, TP ones where tp may exceed 1, the
    virtual pipeline where pp may, fp8's recipe in fp8, torch.compile on the stacks that compile. A size the row
    leaves null may be anything, so its knobs count."""
    lay = case.get("layout") or {}

    def may_exceed_one(key: str) -> bool:
        value = lay.get(key)
        return not isinstance(value, int) or isinstance(value, bool) or value > 1

    prof = stack_profile(problem.training)
    sharded = lay.get("zero") not in (0, "0") or prof.optimizer_always_sharded
    on = {"ep_overlap": problem.model.is_moe and may_exceed_one("ep"),
          "moe_dispatcher": problem.model.is_moe and may_exceed_one("ep"), "moe_token_drop": problem.model.is_moe,
          "expert_tp": problem.model.is_moe and may_exceed_one("tp"),
          "moe_force_balance": problem.model.is_moe and may_exceed_one("ep"),
          "tp_comm_overlap": may_exceed_one("tp"), "sequence_parallel": may_exceed_one("tp"),
          "overlap_grad_reduce": may_exceed_one("dp"), "overlap_param_gather": may_exceed_one("dp") and sharded,
          "zero": may_exceed_one("dp") or may_exceed_one("cp"),
          "cuda_graphs": True, "recompute": True, "fp8_recipe": problem.training.precision == "fp8",
          "torch_compile": problem.training.framework in _COMPILING_STACKS, "vpp": may_exceed_one("pp"),
          "micro_batch": True}
    return tuple(k for k in KNOB_SPECS if on.get(k))


def _model_assumes(knob: str, prof: FrameworkProfile) -> object:
    """The one value the cost model prices for a knob it does not take per case (through the framework profile)."""
    return {"tp_comm_overlap": prof.tp_comm_overlap, "overlap_grad_reduce": prof.dp_overlap > 0,
            "overlap_param_gather": prof.dp_overlap > 0, "torch_compile": False}[knob]


# Kernel choices a run may record that the cost model has no measured rate for, with what it prices instead.
_KERNEL_KNOBS = {
    "fused_expert_mlp": "priced as Transformer Engine's GroupedLinear GEMMs with a separate activation kernel",
    "moe_rank_capacity": "priced at each rank's mean load, without the padded rows",
}


def _expert_tp_status(value: int, tp: object) -> tuple[str, str | None]:
    """The planner splits experts like the attention (etp = tp) or not at all (etp = 1)."""
    if value == 1 or value == tp:
        return "priced", None
    return "not priced", f"expert TP {value} is neither 1 nor the row's TP ({tp}), the two the planner has"


def _status(knob: str, block: dict[str, Any], prof: FrameworkProfile, tp: object = None) -> tuple[str, str | None]:
    """How the model takes a resolved knob: priced with it, its fixed assumption agrees (assumed), priced as the
    nearest value it has (approximate), or not at all (not priced)."""
    value = block["value"]
    if knob == "fp8_recipe" and value == "rowwise":  # per-row scales: finer than a tensor, Hopper runs it slower
        return "approximate", "priced as the blockwise recipe, the finer-scaled fp8 the planner has"
    if knob in ("ep_overlap", "fp8_recipe", "sequence_parallel", "vpp", "micro_batch", "moe_token_drop", "zero",
                "cuda_graphs", "stack", "schedules", "moe_force_balance", "cp_comm", "moe_router_fusion",
                "attention_kernel", "fp8_attention", "gpu", "pipeline_layout", "mtp_layers"):
        return "priced", None
    if knob == "moe_dispatcher" and value == "allgather":  # no allgather dispatcher in the cost model
        return "approximate", "priced as the alltoall dispatcher: every routed copy over the wire, no node dedup"
    if knob == "moe_dispatcher":
        return "priced", None
    if knob == "expert_tp":
        return _expert_tp_status(value, tp)
    if knob in _KERNEL_KNOBS:  # kernels the cost model has no rate for: what the planner prices instead
        off = value is False or (not isinstance(value, bool) and value == 1)  # no fusion / no padding
        return ("assumed", None) if off else ("not priced", _KERNEL_KNOBS[knob])
    if knob == "tp_comm_overlap" and (prof.tp_comm_method or value is False):
        return "priced", None  # planner.cost.tensor prices the stack's overlap with the switch on or off
    if knob == "torch_compile" and (prof.compile_speedup > 1.0 or value is False):
        return "priced", None  # planner.cost.profiles: the eager or the compiled kernel rate
    if knob == "torch_compile" and "loss" in (block.get("scope") or ()):
        return "approximate", f"priced for the compiled loss's memory only; {prof.name}'s compiled speed is not priced"
    if knob == "recompute":
        modules = set(block.get("modules") or ())
        if value == "selective" and not modules <= PLANNER_SELECTIVE_MODULES:
            extra = ", ".join(sorted(modules - PLANNER_SELECTIVE_MODULES))
            return "approximate", f"priced as the planner's selective recompute, which does not re-run {extra}"
        if value == "full" and block.get("layers"):
            return "approximate", f"priced as every layer recomputed; the run recomputed {block['layers']} per stage"
        if value == "offload" and block.get("layers"):
            return "approximate", f"the planner offloads the fewest layers that fit; the run, {block['layers']}"
        return "priced", None
    assumed = _model_assumes(knob, prof)
    if value == assumed:
        return "assumed", None
    return "not priced", f"the model prices {knob} = {assumed} for the {prof.name} profile"


def case_knobs(case: dict[str, Any], entry: dict[str, Any] | None, problem: Problem) -> dict[str, dict[str, Any]]:
    """Every cost-relevant knob of the case with its value, source and status (`stated`, `priced`, `assumed`,
    `approximate`, `not priced` or `unresolved`). A case's own `ran:` block wins over the knob file's entry."""
    ran = dict((entry or {}).get("ran") or {})
    own = case.get("ran")
    if isinstance(own, dict):
        ran.update(own)
    stated = _stated(case)
    prof = dispatcher_profile(stack_profile(problem.training), problem.training)
    out: dict[str, dict[str, Any]] = {}
    optional = tuple(k for k in OPTIONAL_KNOBS if isinstance(ran.get(k), dict) and "value" in ran[k])
    for knob in relevant_knobs(case, problem) + optional:
        block = ran.get(knob)
        if knob in stated:
            out[knob] = {"value": stated[knob], "source": "stated by the case", "status": "stated"}
        elif not isinstance(block, dict) or "unresolved" in block or "value" not in block:
            reason = block.get("unresolved") if isinstance(block, dict) else None
            out[knob] = {"status": "unresolved", "reason": str(reason or "no entry for this knob")}
        else:
            status, why = _status(knob, block, prof, (case.get("layout") or {}).get("tp"))
            out[knob] = {**block, "status": status, **({"reason": why} if why else {})}
    return out


def apply_knobs(problem: Problem, knobs: dict[str, dict[str, Any]]) -> tuple[Problem, tuple[str, ...]]:
    """The problem priced with what the run ran, where the cost model has the knob; and the knobs so applied."""
    fixed, applied = dict(problem.fixed), []
    schedules, training, cluster, model = problem.schedule_choices, problem.training, problem.cluster, problem.model
    recompute_choices, compiled_loss = problem.recompute_choices, problem.compiled_loss
    for knob, k in knobs.items():
        if k["status"] not in ("priced", "approximate") or knob == "stack":
            continue  # the stack is read before the problem is built (recipe_stack)
        if knob == "schedules":  # a schedule the row leaves open is one its codebase ships
            offered = {int(s) for s in codebase_schedules(knobs) or ()}
            schedules = tuple(s for s in (schedules or tuple(int(x) for x in Schedule)) if s in offered)
            continue
        value = k["value"]
        if knob == "ep_overlap":  # Megatron-Core's EP overlap is its combined 1F1B; without it no pairing schedule
            schedules = (int(Schedule.COMBINED_1F1B),) if value else tuple(
                s for s in (schedules or tuple(int(x) for x in Schedule)) if s not in EP_OVERLAP_SCHEDULES)
        elif knob == "fp8_recipe":
            finer = value in ("blockwise", "rowwise")
            training = training.model_copy(update={"fp8_recipe": "blockwise" if finer else "tensorwise"})
        elif knob == "moe_token_drop":
            dropless = value == "dropless"
            training = training.model_copy(update={"moe_capacity_factor": None if dropless else float(value),
                                                   "moe_pad_to_capacity": not dropless and bool(k.get("padded"))})
        elif knob == "cuda_graphs":  # the modules per-layer capture took, where the recipe lists them
            modules = [m for m in (k.get("scope") or ()) if m in GRAPH_MODULES]
            training = training.model_copy(update={"cuda_graphs": value, "cuda_graph_modules": tuple(modules)
                                                   if value == "per-layer" and modules else None})
        elif knob == "attention_kernel":  # unfused overrides the stack's fused attention; fused is the stack's
            training = training.model_copy(update={
                "attention_kernel": "unfused" if value == "unfused" else training.attention_kernel})
        elif knob == "fp8_attention":  # Transformer Engine's fp8 attention, unless the run fell back to unfused
            if value and training.attention_kernel != "unfused":
                training = training.model_copy(update={"attention_kernel": "fp8"})
        elif knob == "pipeline_layout":  # the recipe's own split, on the layout with as many chunks
            training = training.model_copy(update={"pipeline_layout": layout_chunks(value)})
        elif knob == "mtp_layers":  # the MTP modules the run trained, which the case's model block leaves out
            model = model.model_copy(update={"num_nextn_predict_layers": int(value)})
        elif knob == "gpu":  # the run's GPU variant; the cluster's size, tiers and network stay as the case says
            cluster = cluster.model_copy(update={"gpu": load_gpu(value, "ran.gpu")})
        elif knob == "expert_tp":  # priced only as 1 or the layout's tp (_expert_tp_status)
            fixed["etp"] = encode("etp", "1" if value == 1 else "tp", "ran.expert_tp")[1]
        elif knob == "moe_dispatcher":
            training = training.model_copy(update={"moe_dispatcher": "flex" if value.startswith("flex") else
                                                   "alltoall"})
        elif knob == "recompute":
            fixed["recompute"] = RECOMPUTE.index(value)
            recompute_choices = None
        elif knob in ("tp_comm_overlap", "moe_force_balance", "moe_router_fusion"):
            training = training.model_copy(update={knob: bool(value)})
        elif knob == "torch_compile":  # the kernel rate where the stack has the switch; a compiled loss's memory
            training = training.model_copy(update={knob: bool(value)})
            compiled_loss = bool(value) and "loss" in (k.get("scope") or ())
        else:
            name, code = encode({"sequence_parallel": "sp", "vpp": "vpp", "micro_batch": "mbs", "zero": "zero",
                                 "cp_comm": "cp_comm"}[knob],
                                str(value), f"ran.{knob}")
            fixed[name] = code
        applied.append(knob)
    return replace(problem, fixed=fixed, schedule_choices=schedules, training=training, cluster=cluster, model=model,
                   recompute_choices=recompute_choices, compiled_loss=compiled_loss), tuple(applied)


def knob_summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """How many cases have every cost-relevant knob resolved, how many rest on unresolved knobs (and which most
    often), and how many ran a knob the model does not price (or prices only approximately)."""
    def tally(status: str) -> tuple[int, dict[str, int]]:
        counts: dict[str, int] = {}
        hit = 0
        for r in results:
            names = [k for k, v in (r.get("knobs") or {}).items() if v["status"] == status]
            hit += bool(names)
            for k in names:
                counts[k] = counts.get(k, 0) + 1
        return hit, dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    on_unresolved, unresolved = tally("unresolved")
    not_priced, unpriced = tally("not priced")
    approx, approximate = tally("approximate")
    with_knobs = [r for r in results if r.get("knobs") is not None]
    return {"cases": len(with_knobs), "all_resolved": len(with_knobs) - on_unresolved,
            "on_unresolved": on_unresolved, "unresolved_by_knob": unresolved,
            "ran_unpriced": not_priced, "unpriced_by_knob": unpriced,
            "priced_approximately": approx, "approximate_by_knob": approximate}
