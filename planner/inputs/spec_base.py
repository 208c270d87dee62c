"""The base every input spec shares (finite numbers, no true/false for a number) and the bounds on sizes and rates."""

from __future__ import annotations

from typing import Annotated, Any, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

# Bounds on every size and physical figure: far beyond any real model or machine, and tight enough that the cost
# model's float arithmetic stays finite and the divisor enumerations stay short (a hostile 1e30 is an input error).
MAX_SIZE = 10_000_000  # model dimensions, expert counts, GPUs
MIN_RATE, MAX_RATE = 1e-3, 1e9  # TFLOPS, TB/s, GB/s, GiB
MIN_EFFICIENCY = 0.01
Size = Annotated[int, Field(gt=0, le=MAX_SIZE)]
Count = Annotated[int, Field(ge=0, le=MAX_SIZE)]  # 0 = feature off
Rate = Annotated[float, Field(ge=MIN_RATE, le=MAX_RATE)]
Efficiency = Annotated[float, Field(ge=MIN_EFFICIENCY, le=1)]


def _is_number(annotation: Any) -> bool:
    return annotation in (int, float) or any(_is_number(a) for a in get_args(annotation))  # unwraps Optional


class _Spec(BaseModel):
    """Shared validation for every input spec: finite numbers only, and true/false is not a number (pydantic would
    otherwise read `num_gpus: true` as 1)."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and _is_number(field.annotation):
            raise ValueError("expected a number, not true/false")
        return value
