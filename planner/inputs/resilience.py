"""The cluster file's `reliability:` and `storage:` sections: how often the job is interrupted, how long a restart
takes, and where checkpoints go. Every field is optional; None means the cited default of the goodput model
(planner.cost.goodput), so old cluster files and `{gpu}x{count}` keep working and a plan document records which
figures were given and which were defaulted.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

MAX_SECONDS = 1e7  # a restart longer than ~4 months is a typo, and keeps exp(restart / MTBF) finite
MAX_GBPS = 1e9


class _Section(BaseModel):
    """Frozen, finite numbers only, and true/false is not a number (pydantic would read `restart_s: true` as 1)."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name != "async_save":
            raise ValueError("expected a number, not true/false")
        return value


class ReliabilitySpec(_Section):
    failures_per_gpu_hour: float | None = Field(default=None, ge=0.0, le=1.0, description=(
        "interruptions per GPU-hour that stop the job (the job's rate is this x its GPUs); None: the default of "
        "planner.cost.goodput, Llama 3 405B's 419 unexpected interruptions on 16,384 H100 over 54 days"))
    restart_s: float | None = Field(default=None, ge=0.0, le=MAX_SECONDS, description=(
        "seconds from an interruption to training again, before the checkpoint is read back (noticing the failure, "
        "replacing the node, relaunching, NCCL and data-loader start-up); None: planner.cost.goodput's default"))


class StorageSpec(_Section):
    write_gbps: float | None = Field(default=None, gt=0.0, le=MAX_GBPS, description=(
        "aggregate sustained checkpoint write bandwidth of the storage the job writes to, GB/s; None: Llama 3's "
        "Tectonic share (2 TB/s for 16,384 GPUs) scaled to the job's GPUs"))
    read_gbps: float | None = Field(default=None, gt=0.0, le=MAX_GBPS, description=(
        "aggregate read bandwidth when every GPU reads its checkpoint shard back, GB/s; None: as write_gbps"))
    per_gpu_gbps: float | None = Field(default=None, gt=0.0, le=MAX_GBPS, description=(
        "one GPU's share of its node's link to storage, GB/s; None: planner.cost.goodput's default (a DGX H100's "
        "two 400 Gb/s storage ports over 8 GPUs)"))
    async_save: bool = Field(default=False, description=(
        "training resumes once the state is copied to host memory and the write finishes in the background "
        "(Megatron-LM --async-save, torchtitan checkpoint.async_mode); both are off by default"))

    @field_validator("async_save", mode="before")
    @classmethod
    def _bool_only(cls, value: Any) -> Any:
        if not isinstance(value, bool):
            raise ValueError("expected true or false")
        return value


SECTIONS: dict[str, type[_Section]] = {"reliability": ReliabilitySpec, "storage": StorageSpec}
