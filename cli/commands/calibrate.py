"""`plan calibrate`: measure this machine's GPU and write an efficiency profile (docs/efficiency-profile.md).

Registered by cli/main.py with one call; errors are PlanInputError and propagate, so
cli.main.run() prints them as one line and exits 2 like every other bad input (no GPU, no torch, a bad --out).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

COMMAND = "calibrate"


def register(app: typer.Typer) -> None:
    """Add `plan calibrate` to `app`. Idempotent: a second call does not add a second command."""
    if any(info.name == COMMAND for info in app.registered_commands):
        return

    @app.command(name=COMMAND)
    def calibrate(
        out: Annotated[str, typer.Option("--out", "-o", help="where to write the profile YAML")],
        quick: Annotated[bool, typer.Option("--quick", help="fewer shapes and repeats (about a minute; for a "
                                            "smoke test rather than a profile to plan with)")] = False,
        gpu: Annotated[str | None, typer.Option("--gpu", help="catalog GPU key the efficiencies are relative to "
                                                "(default: detected from the device name)")] = None,
    ) -> None:
        """Measure GEMM, attention and memory-bandwidth efficiency on this GPU (needs PyTorch with CUDA)."""
        from planner.evidence.calibrate import run_calibration

        profile = run_calibration(out, quick=quick, gpu=gpu)
        fp8 = f", fp8 GEMM {profile.fp8_matmul_efficiency:.1%}" if profile.fp8_matmul_efficiency else ""
        sys.stdout.write(
            f"wrote {out}: {profile.gpu} bf16 GEMM {profile.matmul_efficiency:.1%} of peak{fp8}, "
            f"attention {profile.attention_efficiency:.1%}, HBM copy {profile.hbm_tbps:.2f} TB/s "
            f"({len(profile.gemm)} GEMMs, {len(profile.attention)} attention shapes)\n"
            "plan with it: add 'profile: PATH' to a cluster YAML (a relative PATH is relative to that YAML)\n"
        )
