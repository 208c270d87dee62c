"""bench/archive_proxy.py reads Megatron-Bridge's performance archive as its tables are laid out (with and without
the FSDP column) and finds each row's sibling in the case file."""

from __future__ import annotations

import sys
from pathlib import Path

from planner.evidence.cases import load_cases

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import archive_proxy as proxy  # noqa: E402

# Two tables as docs/performance-summary-archive.md at NVIDIA-NeMo/Megatron-Bridge@4ab94dfad lays them out: the
# 26.04 one has an FSDP column, the 26.06 one not (headers shortened here); the non-numeric row and the SFT table
# are skipped.
ARCHIVE = """## 26.06 NeMo Container

### Pre-Training Performance

#### Model: GPT OSS 120B

| System | #-GPUs | Precision | GBS | MBS | Sequence Length | TP | PP | CP | VP | EP | Tokens / sec / GPU | ... |
|---|---|---|---|---|---|---|---|---|---|---|---|---|
| DGX-B300 | 64 | MXFP8 | 1280 | 4 | 4096 | 1 | 1 | 1 | n/a | 8 | 18534 | 604 |

## 26.04 NeMo Container

### Pre-Training Performance

#### Model: GPT OSS 120B

| System | #-GPUs | Precision | GBS | MBS | Sequence Length | FSDP | TP | PP | CP | VP | EP | Tokens / sec / GPU | ... |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
| DGX-B200 | 64 | BF16 | 1280 | 4 | 4096 | 0 | 1 | 1 | 1 | n/a | 8 | 13,045 | 355 |
| DGX-H100 | 64 | BF16 | 1280 | 1 | 4096 | 0 | 1 | 4 | 1 | n/a | 8 | n/a | 158 |

### SFT Performance

#### Model: LLAMA3_70B

| DGX-H100 | 32 | FP8 | 32 | 1 | 4096 | 0 | 4 | 4 | 1 | 5 | 1 | 1,000 | 400 |
"""


def test_the_archive_rows_are_read_with_and_without_the_fsdp_column():
    rows = proxy.archive_rows(ARCHIVE)
    assert [(r["container"], r["cluster"], r["precision"], r["ep"], r["mbs"], r["measured"]) for r in rows] == [
        ("26.06 NeMo Container", "b300x64", "fp8", 8, 4, 18534.0),
        ("26.04 NeMo Container", "b200x64", "bf16", 8, 4, 13045.0),
    ]


def test_an_archive_row_finds_its_sibling_in_the_case_file():
    """The 26.04 B200 gpt-oss row's layout and batch are MB-175's (26.02.01): the proxy prices it with MB-175's
    knobs."""
    row = proxy.archive_rows(ARCHIVE)[1]
    siblings = [c["id"] for c in load_cases(None) if "pre-training" in c["source"] and
                proxy._case_key(c) == proxy._key(row)]
    assert "MB-175" in siblings
