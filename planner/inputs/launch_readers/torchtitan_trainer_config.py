"""Map a torchtitan config registry's Trainer.Config (records of planner.inputs.launch_readers.torchtitan_registry)
onto the job-config document planner.inputs.launch_readers.torchtitan reads.

The new keys map onto the job-config keys (torchtitan/config/configs.py @b5bcd76c): the micro-batch is
`training.num_tokens_per_microbatch_per_dp_rank` over `training.max_context_length` sequences; a pipeline runs
`parallelism.num_pp_microbatches` of them per data-parallel rank and step; `training.num_tokens_per_train_step` (-1:
those times the data-parallel size) is the global batch in tokens; `activation_checkpoint` is a policy
(SelectiveAC, per-op, the default; FullAC; MemoryBudgetAC; None); async TP moved to `compile`; the model spec's
converters set the precision.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from planner.errors import PlanInputError
from planner.inputs.launch_readers._common import as_int
from planner.inputs.launch_readers.torchtitan_registry import Record, Unknown

# Converter classes -> the job-config converter names the TOML reader prices (torchtitan/components/quantization).
_CONVERTERS = (("nvfp4", "nvfp4"), ("mxfp8", "mx"), ("float8", "float8"))
_AC_MODES = {"SelectiveAC.Config": "selective", "FullAC.Config": "full", "MemoryBudgetAC.Config": "memory_budget"}


def _fields(record: Any) -> dict[str, Any]:
    return dict(record.fields) if isinstance(record, Record) else {}


def _known(value: Any) -> bool:
    return not isinstance(value, (Unknown, Record))


def document(config: Record, module: str, doubts: list[str], ignored: list[str], source: str) -> dict[str, Any]:
    """The Trainer.Config record as the TOML job config's sections (model, training, parallelism,
    activation_checkpoint, compile), with the new keys mapped onto the old ones (module docstring); what it cannot
    price goes to `ignored`, what the file leaves open to `doubts`."""
    spec = config.fields.get("model_spec")
    doc: dict[str, Any] = {"model": {"name": module}}
    flavor = (spec.args[0] if spec.args else spec.fields.get("flavor")) if isinstance(spec, Record) else None
    if isinstance(spec, Record) and spec.kind == "model_registry" and flavor is not None and _known(flavor):
        doc["model"]["flavor"] = str(flavor)
        converters = []
        for conv in spec.fields.get("converters") or []:
            kind = conv.kind.lower() if isinstance(conv, Record) else str(conv)
            converters.append(next((name for key, name in _CONVERTERS if key in kind), kind))
        if converters:
            doc["model"]["converters"] = converters
        if spec.fields.get("num_mtp_layers"):
            doubts.append(f"model_registry num_mtp_layers={spec.fields['num_mtp_layers']} (not priced)")
    else:
        doubts.append("the model spec (pass --model)")
    training = _fields(config.fields.get("training"))
    par = _fields(config.fields.get("parallelism"))
    seq = training.pop("max_context_length", 2048)
    tokens = training.pop("num_tokens_per_microbatch_per_dp_rank", 16384)
    step_tokens = training.pop("num_tokens_per_train_step", -1)
    counts = par.pop("num_pp_microbatches", 1)
    if not all(_known(v) for v in (seq, tokens, step_tokens, counts)):
        raise PlanInputError("the batch or sequence length is computed by code the reader cannot follow",
                             field="training.num_tokens_per_microbatch_per_dp_rank", source=source,
                             fix="--set training.num_tokens_per_microbatch_per_dp_rank=... and "
                                 "training.max_context_length=...")
    seq = as_int(seq, "training.max_context_length", source)
    tokens = as_int(tokens, "training.num_tokens_per_microbatch_per_dp_rank", source, maximum=1e13)
    step_tokens = -1 if step_tokens == -1 else as_int(step_tokens, "training.num_tokens_per_train_step", source,
                                                      maximum=1e13)  # tokens per step run to billions
    counts = as_int(counts, "parallelism.num_pp_microbatches", source)
    if tokens % seq:
        raise PlanInputError(f"{tokens} tokens per micro-batch is not a whole number of {seq}-token sequences",
                             field="training.num_tokens_per_microbatch_per_dp_rank", source=source,
                             fix="plan prices whole sequences per micro-batch")
    mbs = tokens // seq
    pp = par.get("pipeline_parallel_degree", 1)
    pp = pp if _known(pp) else 1  # an unknown degree is named below and left to the default
    _cuda_graphs(training.pop("disable_cuda_graphs", False), pp, par.get("expert_parallel_degree", 1), spec,
                 ignored, source)
    backend = spec.fields.get("moe_comm_backend") if isinstance(spec, Record) else None
    if _known(backend) and backend:
        par["expert_parallel_comm_backend"] = backend
    doc["training"] = {**training, "seq_len": seq, "local_batch_size": mbs * (counts if pp != 1 else 1)}
    if pp != 1:
        par["pipeline_parallel_microbatch_size"] = mbs
    if step_tokens != -1:
        doc["training"]["global_batch_size"] = step_tokens // seq
    compile_fields = _fields(config.fields.get("compile"))
    if compile_fields.pop("enable_async_tensor_parallel", False):
        par["enable_async_tensor_parallel"] = True
    doc["parallelism"] = par
    if compile_fields:
        doc["compile"] = compile_fields
    ac = config.fields.get("activation_checkpoint", Record("SelectiveAC.Config"))
    if ac is None:
        doc["activation_checkpoint"] = {"mode": "none"}
    elif isinstance(ac, Record) and ac.kind in _AC_MODES:
        doc["activation_checkpoint"] = {"mode": _AC_MODES[ac.kind], "selective_ac_option": "op",
                                        **({"memory_budget": ac.fields["memory_budget"]}
                                           if "memory_budget" in ac.fields else {})}
    else:
        doubts.append("the activation checkpointing policy (priced as torchtitan's default, per-op selective)")
        doc["activation_checkpoint"] = {"mode": "selective", "selective_ac_option": "op"}
    for section in ("training", "parallelism", "compile"):
        for key, value in list(doc.get(section, {}).items()):
            if not _known(value):
                doubts.append(f"{section}.{key} (computed by code the reader cannot follow; its default taken)")
                del doc[section][key]
    return doc


def _cuda_graphs(disabled: Any, pp: Any, ep: Any, spec: Any, ignored: list[str], source: str) -> None:
    """torchtitan captures the whole forward and backward in one CUDA graph unless training.disable_cuda_graphs
    (pytorch/torchtitan#3559, 2026-08-13; trainer.py Trainer.Config._validate_cuda_graphs), and refuses to with
    pipeline parallelism, or with expert parallelism on a dispatcher that synchronises with the host (all but
    MinimalAsyncEP and HybridEP given a non_blocking_capacity_factor). The capture is named, not priced: torchtitan's
    stack is priced eager."""
    if disabled is True:
        return
    if _known(pp) and pp not in (1, None):
        raise PlanInputError("torchtitan captures CUDA graphs unless disabled and refuses them with pipeline "
                             "parallelism", field="training.disable_cuda_graphs", source=source,
                             fix="--set training.disable_cuda_graphs=True, as torchtitan's own error asks")
    fields = spec.fields if isinstance(spec, Record) else {}
    backend = fields.get("moe_comm_backend")
    non_blocking = backend == "minimal_async_ep" or (backend == "hybridep"
                                                     and fields.get("non_blocking_capacity_factor") is not None)
    if _known(ep) and ep not in (1, None) and not non_blocking:
        raise PlanInputError("torchtitan captures CUDA graphs unless disabled and refuses them with expert "
                             "parallelism on a dispatcher that synchronises with the host",
                             field="training.disable_cuda_graphs", source=source,
                             fix="--set training.disable_cuda_graphs=True, or a MinimalAsyncEP / non-blocking "
                                 "HybridEP model_registry")
    ignored.append("the forward and backward captured as one CUDA graph (torchtitan's default, "
                   "training.disable_cuda_graphs False): priced eager")


def module_name(source: str, function: str) -> str:
    """torchtitan's model module: the folder that holds the registry (torchtitan/models/<module>/), else the
    function's prefix before the size (llama3_70b -> llama3)."""
    folder = Path(source).parent.name
    if folder and folder not in (".", "") and Path(source).name == "config_registry.py":
        return folder
    return re.sub(r"_(\d|debug).*$", "", function)
