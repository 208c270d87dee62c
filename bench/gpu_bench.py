"""What the GPU bench scripts (grouped_gemm.py, fp8_accum.py, host_overhead.py) share: PyTorch with CUDA or one
clear error line and exit code 2, and the JSON report they write. Each script puts this checkout on sys.path before
importing it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from planner.errors import PlanInputError
from planner.evidence.calibrate import import_cuda_torch


def cuda_torch_or_exit(script: str) -> Any:
    """torch with a CUDA device, or `error: ...` on stderr and exit code 2 (the CLI's bad-input convention)."""
    try:
        return import_cuda_torch(script)
    except PlanInputError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        sys.exit(2)


def write_report(doc: dict[str, Any], out: str) -> None:
    """The report as sorted, indented JSON at `out`, and a note of it on stderr."""
    Path(out).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {out}", file=sys.stderr)


def report_parser(doc: str, out: str, repeats: int, repeats_help: str) -> argparse.ArgumentParser:
    """The command line of a bench script that times shapes and writes one report: --out and --repeats."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=out, help="JSON report path")
    ap.add_argument("--repeats", type=int, default=repeats, help=repeats_help)
    return ap
