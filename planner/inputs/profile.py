"""Efficiency profiles: kernel efficiencies measured on a real GPU (`plan calibrate`), applied over the catalog's.

The catalog's `matmul_efficiency` / `attention_efficiency` / `hbm_tbps` are published figures (MAMF, FlashAttention
papers, datasheets). A profile replaces them with what one machine achieved, so that the cost model prices kernels at
that machine's rate. The file format is documented in docs/efficiency-profile.md; every loading error is one
PlanInputError line naming the file and the field.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator

from planner.errors import PlanInputError
from planner.inputs.files import check_keys, pydantic_error, read_structured_file
from planner.inputs.hardware import HBM_EFFICIENCY
from planner.inputs.specs import MAX_RATE, MIN_EFFICIENCY, Efficiency, GPUSpec, Rate, Size, _Spec

SCHEMA_VERSION = 1
# A copy benchmark moves at most a few GiB; the bound only keeps hostile numbers out of the arithmetic.
MAX_BYTES = 2**50
# Causal FlashAttention forward runs 2 matmuls over half the s x s scores; backward runs 5 (it recomputes QK^T), i.e.
# 2.5x the forward. The cost model charges attention exactly this way (planner/cost/compute.py), so an efficiency
# measured with this FLOP count plugs straight in.
ATTENTION_BWD_FACTOR = 2.5


class GemmMeasurement(_Spec):
    """One GEMM C[m, n] = A[m, k] @ B[k, n]; tflops = 2·m·n·k / median seconds / 1e12."""

    m: Size
    n: Size
    k: Size
    dtype: Literal["bf16", "fp8"] = "bf16"
    tflops: Rate


class AttentionMeasurement(_Spec):
    """Causal scaled_dot_product_attention forward + backward, q/k/v of shape (batch, heads, seq, head_dim)."""

    batch: Size
    heads: Size
    seq: Size
    head_dim: Size
    tflops: Rate


class BandwidthMeasurement(_Spec):
    """A device-to-device copy of `bytes`; tbps counts the read and the write: 2·bytes / seconds / 1e12."""

    bytes: int = Field(gt=0, le=MAX_BYTES)
    tbps: Rate


class EfficiencyProfile(_Spec):
    """What one GPU achieved. The first block maps onto GPUSpec fields; the lists are the evidence behind it."""

    schema_version: int
    gpu: str = Field(min_length=1, max_length=100, description="catalog key of the GPU it was measured on")
    measured_on: str = Field(max_length=2000, description="device name, driver, torch version, date")
    matmul_efficiency: Efficiency
    fp8_matmul_efficiency: Efficiency | None = None
    attention_efficiency: Efficiency
    hbm_tbps: Rate
    gemm: list[GemmMeasurement] = Field(default_factory=list)
    attention: list[AttentionMeasurement] = Field(default_factory=list)
    memory_bandwidth: list[BandwidthMeasurement] = Field(default_factory=list)

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value != SCHEMA_VERSION:
            raise ValueError(f"unsupported schema_version {value} (this planner reads {SCHEMA_VERSION})")
        return value

    @field_validator("hbm_tbps")
    @classmethod
    def _fits_spec(cls, value: float) -> float:
        # apply_profile divides by HBM_EFFICIENCY; the result must still be a valid GPUSpec rate.
        if value / HBM_EFFICIENCY > MAX_RATE:
            raise ValueError(f"must be at most {MAX_RATE * HBM_EFFICIENCY:g} TB/s")
        return value


_KNOWN = set(EfficiencyProfile.model_fields)


def load_profile(path: str | Path) -> EfficiencyProfile:
    """Read and validate a profile (YAML or JSON, safe loader). Unknown top-level keys are warned about once."""
    src = str(path)
    try:
        doc: Any = read_structured_file(Path(path))
    except PlanInputError as exc:
        # File-level problems (missing, not YAML, a refused tag) have no field of their own; the field is the file.
        raise PlanInputError(exc.message, field=exc.field or "profile", source=src, fix=exc.fix) from None
    if not isinstance(doc, dict):
        raise PlanInputError(f"expected a mapping, got {type(doc).__name__}", field="profile", source=src,
                             fix="write 'schema_version: 1', 'gpu: h100', ... (docs/efficiency-profile.md)")
    unknown = check_keys(doc, src, _KNOWN, cutoff=0.75)
    if "schema_version" not in doc:  # checked first: a file of another kind should say so, not list 5 missing keys
        raise PlanInputError("missing", field="schema_version", source=src,
                             fix="add 'schema_version: 1' (docs/efficiency-profile.md)")
    try:
        profile = EfficiencyProfile.model_validate(doc)
    except ValidationError as exc:
        raise pydantic_error(exc, src, unknown=unknown) from None
    unknown.warn()
    return profile


def dump_profile(profile: EfficiencyProfile, path: str | Path) -> None:
    """Write a profile as YAML in the documented key order (what `plan calibrate --out` writes)."""
    doc = profile.model_dump(mode="json")
    if doc.get("fp8_matmul_efficiency") is None:
        doc.pop("fp8_matmul_efficiency", None)
    header = ("# Efficiency profile written by `plan calibrate` (format: docs/efficiency-profile.md).\n"
              "# Efficiencies are achieved / catalog peak; hbm_tbps is the measured copy bandwidth.\n")
    text = header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120)
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise PlanInputError(f"cannot write the profile ({exc.strerror})", field="--out", source=str(path),
                             fix="choose a writable path") from None


def apply_profile(gpu: GPUSpec, profile: EfficiencyProfile) -> GPUSpec:
    """A copy of `gpu` with the measured efficiencies; catalog values stay for what the profile did not measure.

    The cost model charges memory-bound kernels at hbm_tbps x HBM_EFFICIENCY (planner/inputs/hardware.py). The profile's
    hbm_tbps is already an achieved figure, so it is stored as measured / HBM_EFFICIENCY: the charged bandwidth then
    equals the measured one instead of being discounted twice.
    """
    if profile.gpu != gpu.key:
        print(f"warning: efficiency profile measured on '{profile.gpu}' is applied to '{gpu.key}'; "
              f"its efficiencies are relative to the {profile.gpu} peaks", file=sys.stderr)
    update: dict[str, Any] = {
        "matmul_efficiency": profile.matmul_efficiency,
        "attention_efficiency": profile.attention_efficiency,
        "hbm_tbps": profile.hbm_tbps / HBM_EFFICIENCY,
    }
    if profile.fp8_matmul_efficiency is not None:
        update["fp8_matmul_efficiency"] = profile.fp8_matmul_efficiency
    try:
        return GPUSpec.model_validate({**gpu.model_dump(), **update})  # validated, not model_copy: bounds hold
    except ValidationError as exc:
        raise pydantic_error(exc, "efficiency profile", prefix="gpu.") from None


def resolve_profile_path(cluster_file: Path, value: str) -> Path:
    """Where `profile: VALUE` in a cluster YAML points: relative paths are relative to the cluster file, so a
    cluster and its profile can move together; `~` expands. Existence is checked by load_profile."""
    if not isinstance(value, str) or not value.strip():
        raise PlanInputError(f"must be a path to a profile YAML (got {value!r})", field="profile",
                             source=str(cluster_file), fix="e.g. 'profile: profiles/h100.yaml'")
    if "\x00" in value:
        raise PlanInputError("contains a NUL byte", field="profile", source=str(cluster_file),
                             fix="write a plain file path")
    path = Path(value.strip()).expanduser()
    if path.is_absolute():
        return path
    return Path(cluster_file).expanduser().parent / path


# --- from raw measurements to the headline figures (used by plan calibrate; pure arithmetic, testable on CPU) ------
def attention_flops(batch: int, heads: int, seq: int, head_dim: int) -> float:
    """Forward + backward FLOPs of causal attention, counted as the cost model counts them."""
    forward = 4.0 * batch * heads * seq * seq * head_dim / 2  # QK^T and PV, half the scores under a causal mask
    return forward * (1 + ATTENTION_BWD_FACTOR)


def _ratio(achieved: float, peak: float, what: str, gpu: GPUSpec) -> float:
    eff = achieved / peak
    if eff > 1:
        raise PlanInputError(f"measured {what} {achieved:.0f} TFLOP/s exceeds the catalog peak {peak:g} of "
                             f"'{gpu.key}', so this device is not a {gpu.key}", field="gpu",
                             fix="pass --gpu with the catalog key of this device")
    if eff < MIN_EFFICIENCY:
        raise PlanInputError(f"measured {what} {achieved:.2f} TFLOP/s is below {MIN_EFFICIENCY:.0%} of the "
                             f"catalog peak {peak:g} of '{gpu.key}'", field="gpu",
                             fix="check that the GPU is idle and not throttled, and that --gpu is right")
    return round(eff, 4)


def profile_from_measurements(gpu: GPUSpec, measured_on: str, gemm: list[GemmMeasurement],
                              attention: list[AttentionMeasurement],
                              memory_bandwidth: list[BandwidthMeasurement]) -> EfficiencyProfile:
    """Headline figures: the best GEMM over the measured shapes (the MAMF convention the catalog uses), the best
    attention shape, the best copy bandwidth -- each against the catalog peak of `gpu`."""
    bf16 = [g.tflops for g in gemm if g.dtype == "bf16"]
    fp8 = [g.tflops for g in gemm if g.dtype == "fp8"]
    if not bf16 or not attention or not memory_bandwidth:
        raise PlanInputError("needs bf16 GEMM, attention and bandwidth measurements", field="measurements",
                             fix="run the full calibration")
    fp8_eff = None
    if fp8 and gpu.fp8_tflops:
        fp8_eff = _ratio(max(fp8), gpu.fp8_tflops, "fp8 GEMM", gpu)
    return EfficiencyProfile(
        schema_version=SCHEMA_VERSION, gpu=gpu.key, measured_on=measured_on,
        matmul_efficiency=_ratio(max(bf16), gpu.bf16_tflops, "bf16 GEMM", gpu),
        fp8_matmul_efficiency=fp8_eff,
        attention_efficiency=_ratio(max(a.tflops for a in attention), gpu.bf16_tflops, "attention", gpu),
        hbm_tbps=round(max(b.tbps for b in memory_bandwidth), 4),
        gemm=gemm, attention=attention, memory_bandwidth=memory_bandwidth,
    )
