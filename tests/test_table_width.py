"""The ranked table fits the terminal (80 columns when piped, COLUMNS when set), explains every abbreviation it
prints, names active what-ifs in its header; a --compress ratio on a dimension of size 1 changes nothing."""

import io
import os
import re
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from cli.options import build_problem
from cli.plan_options import PlanOptions
from planner.inputs.layout import Layout
from planner.report.table import LEGEND, compact_layout, render
from planner.search.search import price_layout, search

ROOT = Path(__file__).resolve().parents[1]


def _plan(*args: str, columns: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120)


def _render(problem, width: int) -> str:
    buf = io.StringIO()
    render(search(problem, top=8), Console(file=buf, width=width, no_color=True, soft_wrap=False), timings=False)
    return buf.getvalue()


def test_piped_table_fits_80_columns_and_wider_shows_more():
    narrow = _plan("--model", "llama70b", "--cluster", "h100x512", "--top", "8")
    assert narrow.returncode == 0, narrow.stderr
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 80
    assert "why" not in narrow.stdout.split("\n")[3]
    # the first pick's goodput: one line under the legend (planner.cost.goodput)
    assert sum(line.startswith("goodput  ") and "for #1" in line for line in narrow.stdout.splitlines()) == 1
    wide = _plan("--model", "llama70b", "--cluster", "h100x512", "--top", "8", columns="200")
    assert "why" in wide.stdout and "comp/comm/bub" in wide.stdout
    assert max(len(line) for line in wide.stdout.splitlines()) > 80


def test_every_abbreviation_in_the_table_is_in_the_legend():
    problem = build_problem(PlanOptions(model="mixtral-8x22b", cluster="h100x256", fix=("pp=4",)))
    text = _render(problem, 80)
    legend_line = next(i for i, line in enumerate(text.splitlines()) if line.startswith("legend:"))
    lines = text.splitlines()
    legend_end = next(i for i in range(legend_line, len(lines)) if lines[i].startswith("searched"))
    legend_text = " ".join(" ".join(lines[legend_line:legend_end]).split())  # the legend wraps to as many lines as
    # the table's abbreviations need
    rows = [line.split()[1:] for line in text.splitlines() if line[:1].isdigit()]
    assert rows
    for row in rows:
        for token in row:
            if token[0].isdigit() or "." in token or "%" in token or "," in token:
                break  # the layout column ends where the numbers start
            sized = re.fullmatch(r"([a-z]+)\d+([uh]?|e1)", token)
            # schedule names may end in a digit themselves (zbh1, zbh2): those are legend keys as written;
            # epNe1 (whole experts) is keyed by its suffix
            key = token if token in LEGEND else (sized[2] if sized[2] == "e1" else sized[1] + sized[2]) if sized \
                else token
            key = "tp" if key in ("tp", "pp", "dp", "cp", "ep") else key
            assert key in LEGEND and LEGEND[key] in legend_text, (token, legend_text)


def test_compact_layout_names_its_abbreviations():
    text, used = compact_layout(Layout.from_dict({"tp": 4, "pp": 8, "vpp": 6, "dp": 32, "cp": 2, "ep": 1, "mbs": 1,
                                                  "zero": 1, "recompute": 1, "sp": 1, "schedule": 1, "cp_comm": 1}))
    assert text == "tp4 pp8 v6 dp32 cp2u m1 z1 sele sp il"
    assert {"v", "cpu", "sele", "sp", "il", "z", "m"} <= used


def test_header_names_active_what_ifs():
    problem = build_problem(PlanOptions(model="llama3-8b", cluster="h100x64", compress=("dp=4,tp=1.5",)))
    head = _render(problem, 80).splitlines()[:5]
    assert any(line.startswith("what-if") and "--compress dp=4,tp=1.5" in line for line in head)
    plain = build_problem(PlanOptions(model="llama3-8b", cluster="h100x64"))
    assert not any(line.startswith("what-if") for line in _render(plain, 80).splitlines())


def test_compressing_a_dimension_of_size_one_changes_nothing():
    layout = Layout.from_dict({"tp": 1, "pp": 1, "dp": 64, "cp": 1, "ep": 1, "vpp": 1, "mbs": 1, "zero": 1,
                               "recompute": 1, "sp": 0, "schedule": 0, "cp_comm": 0})
    base = build_problem(PlanOptions(model="llama3-8b", cluster="h100x64"))
    for dim in ("tp", "pp", "cp", "ep"):
        squeezed = build_problem(PlanOptions(model="llama3-8b", cluster="h100x64", compress=(f"{dim}=8",)))
        assert price_layout(squeezed, layout) == price_layout(base, layout), dim
    # while the same ratio on a dimension that exists moves the price
    wide = layout.replace(tp=8, dp=8, sp=1)
    tp = build_problem(PlanOptions(model="llama3-8b", cluster="h100x64", compress=("tp=8",)))
    assert price_layout(tp, wide)["tp_comm_s"] != price_layout(base, wide)["tp_comm_s"]
