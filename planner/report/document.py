"""The stable, machine-readable plan document (docs/plan-schema.md): built and serialised (read back by plan_doc)."""

from __future__ import annotations

import json
import math
from typing import Any

import yaml

from planner import __version__
from planner.cost import flops
from planner.cost.goodput import goodput
from planner.cost.placement import placement_dict
from planner.inputs.frameworks import capabilities_for
from planner.inputs.layout import (
    HSDP,
    CpComm,
    ExpertTp,
    Layout,
    Zero,
    chunk_layers,
    embedding_loss_split,
    uneven_stage_layers,
)
from planner.inputs.problem import Problem
from planner.inputs.specs import ClusterSpec
from planner.report import SCHEMA_VERSION
from planner.report.ranking import band_dict, why_first
from planner.search.search import Plan, SearchResult


def sig(x: float, digits: int = 6) -> float:
    """Round to significant digits so documents are byte-stable across platforms."""
    return float(f"{x:.{digits}g}")


def layout_dict(layout: Layout, metrics: dict[str, float] | None = None,
                layers: int | None = None, nvlink_domain: int | None = None,
                framework: str | None = None, stated: tuple[int, ...] | None = None) -> dict[str, Any]:
    """A plan document's `layout` (docs/plan-schema.md): the knobs as labels, and with the plan's metrics, model depth
    and NVLink domain what follows from them (micro-batches, offloaded layers, HSDP shard group, hybrid CP sizes,
    expert tp, an uneven stage split, the pipeline layout: `stated`, the training's, where it has pp x vpp chunks,
    else the planner's)."""
    tp, cp = layout.tp, layout.cp
    out = {
        "tp": tp, "pp": layout.pp, "dp": layout.dp, "cp": cp, "ep": layout.ep,
        "vpp": layout.vpp, "micro_batch": layout.mbs, "zero": min(int(layout.zero), int(Zero.PARAMETERS)),
        "recompute": layout.recompute.label, "sequence_parallel": layout.sp,
        "schedule": layout.schedule.label, "cp_comm": layout.cp_comm.label, "rank_order": layout.order.label,
    }
    if metrics is not None:
        out["num_microbatches"] = int(round(metrics["num_microbatches"]))
        if metrics.get("offloaded_layers", 0) > 0:  # recompute=offload: --cpu-offloading-num-layers
            out["offload_layers"] = int(round(metrics["offloaded_layers"]))
    if layout.zero == HSDP and nvlink_domain:  # ZeRO-3 inside a domain, replicated across domains
        out["fsdp_shard_group"] = math.gcd(layout.dp * cp, max(nvlink_domain // tp, 1))
    # Hybrid CP: all-to-all size inside the domain, ring across.
    if layout.cp_comm == CpComm.HYBRID and nvlink_domain:
        inside = math.gcd(cp, max(nvlink_domain // tp, 1))
        out["cp_hierarchy"] = [inside, cp // inside]
    if layout.ep > 1:  # whole experts (MoE parallel folding) or split like the attention
        out["expert_tp"] = 1 if layout.etp == ExpertTp.ONE else tp
    if stated is not None and layout.pp > 1 and len(stated) == layout.pp * layout.vpp:
        out["pipeline_layout"] = list(stated)  # the run's own layout, priced as stated
    elif layers is not None:
        emb_loss = framework is not None and capabilities_for(framework).embedding_loss_split
        split = uneven_stage_layers(layers, layout.pp, layout.vpp, emb_loss)
        if split:
            out["first_stage_layers"], out["last_stage_layers"] = split
            if embedding_loss_split(layers, layout.pp, layout.vpp) is not None and emb_loss:
                out["stage_split"] = "embedding_loss"  # the embedding and the loss count as one layer each
        chunks = chunk_layers(layers, layout.pp, layout.vpp)
        if chunks is not None and (framework is None or capabilities_for(framework).pipeline_layout):
            out["pipeline_layout"] = list(chunks)  # decoder layers per model chunk, in model order
    return out


def metrics_dict(metrics: dict[str, float], capacity: float) -> dict[str, float]:
    return {
        "step_time_s": sig(metrics["step_time_s"]),
        "tokens_per_s_per_gpu": sig(metrics["tokens_per_s_per_gpu"]),
        "mfu": sig(metrics["mfu"], 4),
        "memory_peak_gib": sig(metrics["memory_peak_gib"], 4),
        "memory_reserved_gib": sig(metrics["memory_reserved_gib"], 4),
        "memory_allocated_gib": sig(metrics["memory_allocated_gib"], 4),
        "memory_capacity_gib": sig(capacity, 4),
    }


def breakdown_dict(metrics: dict[str, float]) -> dict[str, Any]:
    time_keys = ("compute_s", "exposed_comm_s", "bubble_s", "optimizer_s", "recompute_s", "offload_s", "tp_comm_s",
                 "cp_comm_s", "ep_comm_s", "fsdp_comm_s", "nic_comm_s", "pp_comm_s", "dp_comm_s")
    mem = {k.removeprefix("mem_").removesuffix("_gib"): sig(metrics[k], 4) for k in metrics if k.startswith("mem_")}
    return {**{k: sig(metrics[k]) for k in time_keys}, "memory_gib": mem}


def cluster_dict(cluster: ClusterSpec) -> dict[str, Any]:
    """The cluster as documents write it: every field, `tiers` only where the file gave them (a two-tier cluster's
    document reads as before tiers existed)."""
    out = cluster.model_dump()
    if out["tiers"] is None:
        del out["tiers"]
    return out


def goodput_dict(problem: Problem, metrics: dict[str, float]) -> dict[str, Any]:
    """What failures, checkpoints and restarts leave of the step time's throughput (planner.cost.goodput)."""
    g = goodput(problem, metrics["step_time_s"])
    never = not math.isfinite(g.mtbf_s)  # no failures: no MTBF, no checkpoint interval (null)
    return {
        "goodput": sig(g.goodput, 4),
        "tokens_per_s_per_gpu": sig(metrics["tokens_per_s_per_gpu"] * g.goodput),
        "failures_per_gpu_hour": sig(g.failures_per_gpu_hour, 4), "mtbf_h": None if never else sig(g.mtbf_s / 3600, 4),
        "checkpoint_gb_per_gpu": sig(g.checkpoint_gb, 4), "checkpoint_write_s": sig(g.write_s, 4),
        "checkpoint_stall_s": sig(g.stall_s, 4), "async_save": g.async_save,
        "interval_steps": g.interval_steps, "interval_s": None if never else sig(g.interval_s, 4),
        "relaunch_s": sig(g.relaunch_s, 4), "restore_s": sig(g.restore_s, 4), "restart_s": sig(g.restart_s, 4),
        "lost_work_s": sig(g.lost_work_s, 4), "loss": {k: sig(v, 4) for k, v in g.loss.items()},
    }


def inputs_dict(problem: Problem, options: dict[str, Any]) -> dict[str, Any]:
    model = problem.model.dump()
    cluster = cluster_dict(problem.cluster)
    return {"model": model, "cluster": cluster, "training": problem.training.model_dump(), "options": options}


def plan_entry(rank: int, plan: Plan, capacity: float, layers: int | None = None,
               nvlink_domain: int | None = None, framework: str | None = None,
               band: dict[str, Any] | None = None, goodput: dict[str, Any] | None = None,
               problem: Problem | None = None) -> dict[str, Any]:
    """One ranked plan; with `goodput`, what failures and checkpoints leave of its throughput (goodput_dict); with
    `problem`, its `placement`: each parallel dimension's group and the innermost network tier whose one domain holds
    it (planner.cost.placement)."""
    stated = problem.training.pipeline_layout if problem is not None else None
    entry = {"rank": rank, "layout": layout_dict(plan.layout, plan.metrics, layers, nvlink_domain, framework, stated),
             "metrics": metrics_dict(plan.metrics, capacity), "breakdown": breakdown_dict(plan.metrics)}
    if band is not None:
        entry["band"] = band
    if goodput is not None:
        entry["goodput"] = goodput
    if problem is not None:
        entry["placement"] = {dim: info["within"] for dim, info in placement_dict(problem, plan.layout).items()}
    return entry


def ranking_dict(result: SearchResult) -> dict[str, Any]:
    """How the plans were ordered (planner.search.preference): by price alone or by preference inside the tie
    width, and why #1 is not the fastest-priced plan where it is not."""
    from planner.report.table import compact_layout

    fastest = result.fastest
    out: dict[str, Any] = {"rank_by": result.rank_by, "tie_width": sig(result.tie_width, 4),
                           "why_first": why_first(result, lambda lay: compact_layout(lay)[0]), "fastest": None}
    if fastest is not None:
        p = result.problem
        out["fastest"] = {"rank": result.fastest_rank,
                          "layout": layout_dict(fastest.layout, fastest.metrics, p.model.num_hidden_layers,
                                                p.cluster.nvlink_domain, p.training.framework,
                                                p.training.pipeline_layout),
                          "metrics": metrics_dict(fastest.metrics, p.cluster.gpu.memory_gib)}
    return out


def build(result: SearchResult, options: dict[str, Any]) -> dict[str, Any]:
    p = result.problem
    cap = p.cluster.gpu.memory_gib
    return {
        "schema_version": SCHEMA_VERSION,
        "planner_version": __version__,
        "inputs": inputs_dict(p, options),
        "model_summary": {"params": flops.total_params(p.model), "active_params": flops.active_params(p.model)},
        "plans": [plan_entry(i + 1, plan, cap, p.model.num_hidden_layers, p.cluster.nvlink_domain,
                              p.training.framework, band_dict(p, plan.layout, plan.metrics),
                              goodput_dict(p, plan.metrics), p)
                  for i, plan in enumerate(result.plans)],
        "ranking": ranking_dict(result),
        "search": {"candidates": result.candidates, "feasible": result.feasible,
                   "pruned": dict(sorted(result.pruned.items())), "proven_best": result.proven_best},
    }


def dumps(doc: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"
    return yaml.safe_dump(doc, sort_keys=True, default_flow_style=False)



def jsonable(obj: Any) -> Any:
    """Tuples to lists, numpy scalars to floats, non-finite to None: JSON/YAML-safe and deterministic."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "item"):
        obj = obj.item()
    if isinstance(obj, float):
        return round(obj, 9) if math.isfinite(obj) else None
    return obj
