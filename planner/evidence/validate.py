"""`plan validate`: score the cost model against measured, published training runs.

For each case every knob the source states is pinned and the rest is searched (a published run is a tuned run); the
best plan's prediction is compared with the measurement. Nothing here is tuned per case.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from planner.cost.profiles import MEMORY_METRIC, profile_for
from planner.errors import NoFeasiblePlan, PlanInputError
from planner.inputs.catalog import data_dir, load_cluster, model_catalog, model_from_mapping
from planner.inputs.files import pydantic_error, read_structured_file
from planner.inputs.frameworks import SUCCESSOR, beyond_era, canonical_framework, capabilities_for
from planner.inputs.layout import EP_OVERLAP_SCHEDULES, Schedule, encode
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec
from planner.report.document import layout_dict, sig
from planner.search.search import search

DEFAULT_CASES = "published_runs.yaml"
_LAYOUT_KEYS = {"tp": "tp", "pp": "pp", "dp": "dp", "cp": "cp", "ep": "ep", "vpp": "vpp",
                "sequence_parallel": "sp", "recompute": "recompute", "zero": "zero", "schedule": "schedule"}


def default_cases_path() -> Path:
    return data_dir("validation") / DEFAULT_CASES


def load_cases(path: str | None) -> list[dict[str, Any]]:
    src = Path(path) if path else default_cases_path()
    doc = read_structured_file(src)
    if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
        raise PlanInputError("expected 'schema_version: 1' and a 'cases:' list", source=str(src),
                             fix="see README, 'Validation case format'")
    if doc.get("schema_version") != 1:
        raise PlanInputError(f"unsupported schema_version {doc.get('schema_version')!r}", source=str(src),
                             field="schema_version", fix="use schema_version: 1")
    return doc["cases"]


# Shape keys a case block must state, and agree on, before it is read as the catalog model its name starts with.
_CORE_SHAPE = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "num_experts_per_tok")
_EXPERT_COUNT = ("num_local_experts", "n_routed_experts", "num_experts")
_MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules", "use_mtp")


def _squash(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def catalog_architecture(block: dict[str, Any]) -> dict[str, Any]:
    """The config a case block abbreviates. Published runs name real models, but the blocks carry only the basic
    keys: Qwen3's head_dim of 128 (not hidden/heads), gpt-oss's sliding-window layers and 64-wide heads, Llama 4's
    interleaved MoE layers and shared expert are missing, and the model would be priced wrongly. When the block's
    name starts with a catalog model's name (ignoring case and punctuation) and every core shape key it states
    agrees with that model's config, the catalog config is used (the block's own keys can be abbreviations in
    another convention). Multi-token prediction is a training choice: only a block that states it trains it."""
    name = _squash(str(block.get("name", "")))
    for cat_name, doc in model_catalog().items():
        if not name.startswith(_squash(cat_name)):
            continue
        stated = {k: block[k] for k in _CORE_SHAPE if k in block}
        experts = next((block[k] for k in _EXPERT_COUNT if k in block), None)
        cat_experts = next((doc[k] for k in _EXPERT_COUNT if k in doc), None)
        if len(stated) < 3 or any(doc.get(k) != v for k, v in stated.items()) or experts != cat_experts:
            continue
        merged = {k: v for k, v in doc.items() if k not in _MTP_KEYS and k not in ("aliases", "published_params")}
        merged.update({k: block[k] for k in _MTP_KEYS if k in block})
        merged["name"] = block.get("name", cat_name)
        return merged
    return block


# Precision spellings of papers, tables and launch configs (llm-foundry's amp_bf16, Lightning's bf16-mixed, NeMo's
# mixed-precision presets), and what the planner prices each as.
_PRECISION_PREFIXES = ("bf16", "bfloat16", "fp16", "float16", "half", "fp8", "float8", "e4m3", "mxfp8", "fp4", "nvfp4",
                       "mxfp4")
_PRICED_AS = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "bf16", "float16": "bf16", "half": "bf16", "fp8": "fp8",
              "float8": "fp8", "e4m3": "fp8", "mxfp8": "fp8", "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4"}


def case_precision(case: dict[str, Any]) -> tuple[str | None, str | None]:
    """The precision a case is priced at (None when it names none the planner prices), and a note where that is not
    its own word: fp16 runs at bf16's tensor-core rate with the same bytes per value (its loss scaling is not
    priced); not stated means bf16."""
    raw = (case.get("training") or {}).get("precision")
    if raw is None:
        return "bf16", None
    word = str(raw).strip().lower().replace("_", "-").removeprefix("amp-").removesuffix("-mixed")
    word = word.removeprefix("bf16-with-")  # Megatron-Bridge presets: bf16_with_fp8_current_scaling_mixed, ...
    head = next((p for p in sorted(_PRECISION_PREFIXES, key=len, reverse=True) if word.startswith(p)), None)
    if head is None:
        return None, None
    priced = _PRICED_AS[head]
    if head in ("fp16", "float16", "half"):
        return priced, "fp16 priced as bf16 (the same tensor-core rate and bytes; loss scaling not priced)"
    return priced, None


def case_framework(case: dict[str, Any]) -> tuple[str, str | None]:
    """The profile a case is priced with, and why it is not the one the case names (None when it is). A profile
    that models one era of a framework (paper-era `megatron`) cannot price a run that states what only the later
    stack runs (fp8, context parallelism...): such a run used the later stack (frameworks.SUCCESSOR)."""
    tr, lay = case.get("training") or {}, case.get("layout") or {}
    stated = str(tr.get("framework") or "other")
    named = canonical_framework(stated)
    if named is None:  # a stack with no row of its own: priced as an unnamed one, and said so
        return "other", f"priced as other: no profile for the framework '{stated}'"

    def size(key: str) -> int:
        value = lay.get(key)
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else 1

    later = beyond_era(named, case_precision(case)[0] or "bf16", size("cp"), size("ep"))
    if not later:
        return named, None
    successor = SUCCESSOR[named]
    era = capabilities_for(named).source.split(" (")[0]
    return successor, f"priced as {successor}: it states {', '.join(later)}, which {era} did not run"


# Layout values as other stacks' configs spell them: activation checkpointing as a switch (torchtitan, llm-foundry:
# on = every layer's full recompute), Megatron's recompute methods (uniform / block are full recompute), sharding by
# FSDP's strategy names and ZeRO by "zero-N".
_RECOMPUTE_WORDS = {"true": "full", "false": "none", "uniform": "full", "block": "full", "off": "none", "on": "full"}
_ZERO_WORDS = {"fsdp": "3", "full-shard": "3", "shard-grad-op": "2", "hybrid-shard": "hsdp", "no-shard": "0",
               "ddp": "0", "dist-opt": "1", "distributed-optimizer": "1"}


def _layout_word(knob: str, value: object) -> object:
    """A case's layout value in the planner's own words (the value itself when it already is one)."""
    if value is None or knob not in ("recompute", "zero"):
        return value
    word = str(value).strip().lower().replace("_", "-").replace(" ", "-")
    if knob == "recompute":
        return _RECOMPUTE_WORDS.get(word, value)
    return _ZERO_WORDS.get(word, word.removeprefix("zero").removeprefix("-").removeprefix("stage").strip("-"))


def case_problem(case: dict[str, Any], source: str) -> Problem:
    where = f"{source}#{case.get('id', '?')}"
    for key in ("model", "cluster", "training", "layout", "measured"):
        if key not in case:
            raise PlanInputError("missing", field=key, source=where, fix="see README, 'Validation case format'")
    for key in ("model", "training", "layout", "measured"):
        if not isinstance(case[key], dict):
            raise PlanInputError(f"expected a mapping, got {type(case[key]).__name__}", field=key, source=where,
                                 fix="see README, 'Validation case format'")
    model = model_from_mapping(catalog_architecture(case["model"]), where)
    cluster = load_cluster(str(case["cluster"]))
    tr = case["training"]
    for key in ("seq_len", "global_batch"):
        if tr.get(key) is None:
            raise PlanInputError("missing", field=f"training.{key}", source=where,
                                 fix="see README, 'Validation case format'")
    precision = case_precision(case)[0]
    if precision is None:
        raise PlanInputError(f"'{str(tr.get('precision'))[:40]}' is not a training precision plan prices",
                             field="training.precision", source=where, fix="use bf16, fp16, fp8 or fp4")
    try:
        # A null means "not stated": the defaults a reader of the paper would assume, never a dropped case.
        # block-scaled fp8 by its names (Megatron-Bridge's subchannel preset, Megatron-Core's --fp8-recipe blockwise)
        blockwise = precision == "fp8" and any(w in str(tr.get("precision")).lower() for w in ("subchannel", "block"))
        training = TrainingSpec(seq_len=tr["seq_len"], global_batch=tr["global_batch"], precision=precision,
                                framework=case_framework(case)[0],
                                fp8_recipe="blockwise" if blockwise else "tensorwise")
    except ValidationError as exc:
        raise pydantic_error(exc, where, prefix="training.") from None
    fixed: dict[str, int] = {}
    for src_key, knob in _LAYOUT_KEYS.items():
        value = _layout_word(knob, case["layout"].get(src_key))
        if value is not None:
            name, enc = encode(knob, str(value), f"layout.{src_key}")
            fixed[name] = enc
    # A schedule not stated is any schedule but the opt-in pairing ones (Megatron's EP overlap, DualPipe): those
    # change the price a lot and a run that used them names them.
    unstated = tuple(int(s) for s in Schedule if s not in EP_OVERLAP_SCHEDULES)
    if tr.get("micro_batch") is not None:
        fixed["mbs"] = encode("mbs", str(tr["micro_batch"]), "training.micro_batch")[1]
    # a published run happened: no headroom reorders its unstated knobs (the fit check still applies)
    return Problem(model, cluster, training, fixed=fixed, trust_pins=True, schedule_choices=unstated,
                   memory_headroom=0.0)


# Published peak memory comes from the framework's own log, and stacks log different figures (Megatron: peak
# allocated; torchtitan: peak reserved): the prediction compared is the one the case's framework profile says it
# prints (FrameworkProfile.memory_reported), never the device total the fit check uses.


def _ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas


# Step time and tokens/s/GPU, when a case gives both, must describe the same step: tokens/s/GPU x GPUs x step time
# = global batch x sequence length. Published tables derive one from the other, so a gap above this share means the
# case misstates one of them (the batch, the GPU count or a figure) and no prediction can be scored against it.
CONSISTENCY_TOLERANCE = 0.10


def measurement_conflict(case: dict[str, Any], problem: Problem) -> str | None:
    """Why the case's measured figures contradict its own batch, or None when they agree (or cannot be compared)."""
    meas, tr = case.get("measured") or {}, problem.training
    tps, step = meas.get("tokens_per_s_per_gpu"), meas.get("step_time_s")
    if not (isinstance(tps, int | float) and isinstance(step, int | float) and tps > 0 and step > 0):
        return None
    sequences = tps * problem.num_gpus * step / tr.seq_len
    if abs(sequences / tr.global_batch - 1) <= CONSISTENCY_TOLERANCE:
        return None
    return (f"measured figures disagree: tokens/s/GPU x GPUs x step time = {sequences:,.0f} sequences per step, "
            f"training.global_batch = {tr.global_batch:,}")


def run_case(case: dict[str, Any], source: str) -> dict[str, Any]:
    measured = case.get("measured")
    out: dict[str, Any] = {"id": case.get("id"), "tier": case.get("tier"), "source": short_source(case),
                           "measured": measured if isinstance(measured, dict) else {}}
    try:
        problem = case_problem(case, source)
    except PlanInputError as exc:
        return {**out, "layout": None, "predicted": None, "error": None, "reason": exc.one_line()}
    note = None
    try:
        result = search(problem, top=1)
    except NoFeasiblePlan:
        try:
            result = search(replace(problem, enforce_memory=False), top=1)
            note = "predicted to exceed GPU memory; priced anyway"
        except NoFeasiblePlan:
            from planner.search.cpsat import diagnose

            core = diagnose(problem)
            names = ", ".join(r.name for r in core.core) or "memory"
            return {**out, "layout": None, "predicted": None, "error": None,
                    "reason": f"the stated layout breaks: {names}"}
    read = (case_framework(case)[1], case_precision(case)[1])
    note = "; ".join(n for n in (*read, note) if n) or None
    plan = result.plans[0]
    mt = plan.metrics
    figure = profile_for(problem.training.framework).memory_reported
    pred = {"tokens_per_s_per_gpu": sig(mt["tokens_per_s_per_gpu"]), "step_time_s": sig(mt["step_time_s"]),
            "memory_gib": sig(mt[MEMORY_METRIC[figure]], 4), "memory_figure": figure, "mfu": sig(mt["mfu"], 4)}
    meas = {k: v for k, v in out["measured"].items()
            if isinstance(v, int | float) and not isinstance(v, bool) and v > 0}  # unusable figures are skipped
    err: dict[str, float] = {}
    conflict = measurement_conflict(case, problem)
    if conflict:
        meas = {}  # priced, but scored against neither figure
    if meas.get("tokens_per_s_per_gpu"):
        err["throughput"] = sig(_ape(pred["tokens_per_s_per_gpu"], meas["tokens_per_s_per_gpu"]), 4)
    elif meas.get("step_time_s"):
        err["throughput"] = sig(_ape(1 / pred["step_time_s"], 1 / meas["step_time_s"]), 4)
    if meas.get("memory_gib"):
        err["memory"] = sig(_ape(pred["memory_gib"], meas["memory_gib"]), 4)
    res = {**out, "layout": layout_dict(plan.layout, mt, problem.model.num_hidden_layers,
                                        problem.cluster.nvlink_domain, problem.training.framework),
           "predicted": pred, "error": err}
    if note:
        res["note"] = note
    if conflict:
        res["reason"] = conflict
    return res


def short_source(case: dict[str, Any]) -> str:
    src = str(case.get("source", "unknown"))
    head = src.split(" -- ")[0].split(",")[0].strip().strip("'\"")
    return head[:40]


def _stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"cases": 0}
    vals = sorted(values)
    p90 = vals[min(len(vals) - 1, int(round(0.9 * (len(vals) - 1))))]
    return {"cases": len(vals), "median_ape": sig(statistics.median(vals), 4), "p90_ape": sig(p90, 4),
            "within_10pct": sig(sum(v <= 0.10 for v in vals) / len(vals), 4),
            "within_20pct": sig(sum(v <= 0.20 for v in vals) / len(vals), 4)}


def kendall_tau(xs: list[float], ys: list[float]) -> float:
    """Kendall's tau-a over all pairs (ties count as neither concordant nor discordant)."""
    n = len(xs)
    conc = disc = 0
    for i in range(n):
        for j in range(i + 1, n):
            s = (xs[i] - xs[j]) * (ys[i] - ys[j])
            conc += s > 0
            disc += s < 0
    pairs = n * (n - 1) / 2
    return (conc - disc) / pairs if pairs else 0.0


def _layout_signature(case: dict[str, Any]) -> tuple:
    lay = case.get("layout", {})
    return tuple(sorted((k, str(v)) for k, v in lay.items())) + (("mbs", str(case["training"].get("micro_batch"))),)


def ranking_groups(cases: list[dict[str, Any]], results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs of one source, model, cluster, sequence length, batch and precision that differ in layout or schedule.

    Repeats of the same stated layout (e.g. one recipe measured on several container releases) are averaged into one
    entry, so a group ranks layouts, not software versions; groups need two or more distinct layouts.
    """
    groups: dict[tuple, dict[tuple, list[int]]] = defaultdict(lambda: defaultdict(list))
    for i, case in enumerate(cases):
        if results[i]["predicted"] is None or "throughput" not in (results[i]["error"] or {}) or not isinstance(
                results[i]["measured"].get("tokens_per_s_per_gpu"), int | float):
            continue
        tr = case.get("training", {})
        key = (short_source(case), case.get("model", {}).get("name"), case.get("cluster"), tr.get("seq_len"),
               tr.get("global_batch"), tr.get("precision"))
        groups[key][_layout_signature(case)].append(i)
    out = []
    for key, layouts in sorted(groups.items(), key=lambda kv: str(kv[0])):
        if len(layouts) < 2:
            continue
        members = list(layouts.values())
        meas = [statistics.mean(cases[i]["measured"]["tokens_per_s_per_gpu"] for i in idx) for idx in members]
        pred = [statistics.mean(results[i]["predicted"]["tokens_per_s_per_gpu"] for i in idx) for idx in members]
        out.append({"group": f"{key[0]} | {key[1]} | {key[2]} | s={key[3]} gbs={key[4]} {key[5]}",
                    "cases": [cases[idx[0]]["id"] for idx in members], "kendall_tau": sig(kendall_tau(pred, meas), 3),
                    "regret": sig(regret(pred, meas), 4)})
    return out


def regret(predicted: list[float], measured: list[float]) -> float:
    """What trusting the planner costs in a ranking group: 1 - measured throughput of the layout it ranks first /
    the best measured throughput. 0 when its first pick is the measured best; ties in the prediction count against
    the planner (the worst of the tied layouts)."""
    top = max(predicted)
    picked = min(m for p, m in zip(predicted, measured, strict=True) if p == top)
    return 1.0 - picked / max(measured)


def summarize(cases: list[dict[str, Any]], results: list[dict[str, Any]]) -> dict[str, Any]:
    by: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        if not r["error"]:
            continue
        for metric in ("throughput", "memory"):
            if metric in r["error"]:
                by[f"tier:{r['tier']}"][metric].append(r["error"][metric])
                by[f"source:{r['source']}"][metric].append(r["error"][metric])
                by["all"][metric].append(r["error"][metric])
    table = {k: {m: _stats(v[m]) for m in ("throughput", "memory")} for k, v in sorted(by.items())}
    worst = sorted((r for r in results if r["error"] and "throughput" in r["error"]),
                   key=lambda r: -r["error"]["throughput"])[:10]
    groups = ranking_groups(cases, results)
    taus = [g["kendall_tau"] for g in groups]
    regrets = [g["regret"] for g in groups]
    worst_regret = max(groups, key=lambda g: g["regret"]) if groups else None
    return {
        "cases": len(results),
        "predicted": sum(r["predicted"] is not None for r in results),
        "not_modelled": [{"id": r["id"], "reason": r["reason"]} for r in results if r["predicted"] is None],
        "not_scored": [{"id": r["id"], "reason": r["reason"]} for r in results
                       if r["predicted"] is not None and r.get("reason")],
        "groups": table,
        "worst": [{"id": r["id"], "tier": r["tier"], "throughput_ape": r["error"]["throughput"],
                   "predicted": r["predicted"]["tokens_per_s_per_gpu"],
                   "measured": r["measured"].get("tokens_per_s_per_gpu")} for r in worst],
        "ranking": {"groups": groups, "mean_kendall_tau": sig(statistics.mean(taus), 3) if taus else None,
                    "mean_regret": sig(statistics.mean(regrets), 4) if regrets else None,
                    "worst_regret": ({"group": worst_regret["group"], "regret": worst_regret["regret"]}
                                     if worst_regret else None)},
    }


def validate(path: str | None = None) -> dict[str, Any]:
    cases = load_cases(path)
    source = path or str(default_cases_path().name)
    results = [run_case(c if isinstance(c, dict) else {}, source) for c in cases]
    return {"schema_version": 1, "cases": results, "summary": summarize(cases, results)}
