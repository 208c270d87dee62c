"""Reading a validation case (the format docs/accuracy.md's "Validation case format" defines) into a planning problem:
the case's model (a catalog config where the block abbreviates one), cluster, training and the knobs it states,
in the spellings papers, tables and launch configs use. `plan validate` (planner.evidence.validate) prices them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from planner.errors import PlanInputError
from planner.inputs.catalog import data_dir, load_cluster, model_catalog, model_from_mapping
from planner.inputs.files import pydantic_error, read_structured_file
from planner.inputs.frameworks import SUCCESSOR, beyond_era, canonical_framework, capabilities_for
from planner.inputs.layout import EP_OVERLAP_SCHEDULES, Recompute, Schedule, encode
from planner.inputs.problem import Problem
from planner.inputs.specs import TrainingSpec

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
                             fix="see docs/accuracy.md, 'Validation case format'")
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


def case_token_drop(case: dict[str, Any]) -> tuple[Any, Any, str | None]:
    """(capacity factor, padded, note) of a case: its training block's moe_capacity_factor / moe_pad_to_capacity
    (as written: TrainingSpec checks them and names the key), else what its source's label says. Megatron-Bridge's
    performance tables name token-drop runs "<model> (tokendrop)": their --use_tokendrop applies apply_moe_token_drop
    with its defaults, capacity factor 1.0 and inputs padded to capacity (scripts/performance/utils/overrides.py,
    training/utils/moe_token_drop.py)."""
    tr = case.get("training") or {}
    if tr.get("moe_capacity_factor") is not None:
        return tr["moe_capacity_factor"], tr.get("moe_pad_to_capacity") or False, None
    model = case.get("model")
    name = str(model.get("name", "")) if isinstance(model, dict) else str(model or "")
    if "tokendrop" in _squash(name):
        return 1.0, True, "read '(tokendrop)' as Megatron-Bridge's token drop: capacity factor 1.0, padded"
    return None, False, None


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


def case_problem(case: dict[str, Any], source: str, stack: str | None = None) -> Problem:
    """The problem a case poses, priced with `stack` where its recipe names the software that ran it (else the
    profile case_framework reads from its row)."""
    where = f"{source}#{case.get('id', '?')}"
    for key in ("model", "cluster", "training", "layout", "measured"):
        if key not in case:
            raise PlanInputError("missing", field=key, source=where,
                                 fix="see docs/accuracy.md, 'Validation case format'")
    for key in ("model", "training", "layout", "measured"):
        if not isinstance(case[key], dict):
            raise PlanInputError(f"expected a mapping, got {type(case[key]).__name__}", field=key, source=where,
                                 fix="see docs/accuracy.md, 'Validation case format'")
    model = model_from_mapping(catalog_architecture(case["model"]), where)
    cluster = load_cluster(str(case["cluster"]))
    tr = case["training"]
    for key in ("seq_len", "global_batch"):
        if tr.get(key) is None:
            raise PlanInputError("missing", field=f"training.{key}", source=where,
                                 fix="see docs/accuracy.md, 'Validation case format'")
    precision = case_precision(case)[0]
    if precision is None:
        raise PlanInputError(f"'{str(tr.get('precision'))[:40]}' is not a training precision plan prices",
                             field="training.precision", source=where, fix="use bf16, fp16, fp8 or fp4")
    try:
        # A null means "not stated": the defaults a reader of the paper would assume, never a dropped case.
        # block-scaled fp8 by its names (Megatron-Bridge's subchannel preset, Megatron-Core's --fp8-recipe blockwise)
        blockwise = precision == "fp8" and any(w in str(tr.get("precision")).lower() for w in ("subchannel", "block"))
        capacity, padded, _ = case_token_drop(case)
        training = TrainingSpec(seq_len=tr["seq_len"], global_batch=tr["global_batch"], precision=precision,
                                framework=stack or case_framework(case)[0],
                                fp8_recipe="blockwise" if blockwise else "tensorwise",
                                moe_capacity_factor=capacity, moe_pad_to_capacity=padded)
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
    # Recomputation not stated is any mode but fine-grained activation offloading: off by default in Megatron-Core
    # (TransformerConfig.fine_grained_activation_offloading), its module list is a recipe's choice, and no published
    # row states it, so pricing it where a run does not name it would credit runs with a feature they did not use.
    recompute = tuple(int(r) for r in Recompute if r != Recompute.OFFLOAD_MODULES)
    # a published run happened: no headroom reorders its unstated knobs (the fit check still applies)
    return Problem(model, cluster, training, fixed=fixed, trust_pins=True, schedule_choices=unstated,
                   recompute_choices=recompute, memory_headroom=0.0)
