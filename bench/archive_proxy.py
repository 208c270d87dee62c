"""A proxy for held-out runs: Megatron-Bridge's performance-archive rows that the case file does not carry, each
priced with the knobs of its sibling, the case-file row of the same model, system, precision, layout and batch
from another container. Markdown on stdout.

    git -C <Megatron-Bridge clone> show 4ab94dfad:docs/performance-summary-archive.md > archive.md
    python bench/archive_proxy.py archive.md

The archive's tables state the layout, batch and precision of each pre-training row and its tokens/s per GPU; what
else a row ran (graphs, dispatcher, overlap) changes between containers, so a sibling's knobs are a guess and the
error of one row says little. Over the 50-odd rows the median and P90 say how far the fitted cost model carries
past the rows it was fitted on, which is why the script exists: rerun it whenever MoE or Blackwell terms change.
Rows without a sibling (new layouts, new models) are counted and left out.
"""

from __future__ import annotations

import argparse
import copy
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's planner, not an installed one

from planner.evidence.cases import load_cases  # noqa: E402
from planner.evidence.recipes import default_recipes_path, load_recipes  # noqa: E402
from planner.evidence.validate import run_case  # noqa: E402

SYSTEMS = {"DGX-GB300": "gb300", "DGX-GB200": "gb200", "DGX-B300": "b300", "DGX-B200": "b200", "DGX-H100": "h100"}
PRECISIONS = {"BF16": "bf16", "FP8": "fp8", "MXFP8": "fp8", "FP8-CS": "fp8", "FP8-MX": "fp8", "FP8-DS": "fp8",
              "NVFP4": "fp4"}
CONTAINER = re.compile(r'"([^"]+)"')


def archive_rows(text: str) -> list[dict]:
    """Every pre-training row of the archive: container, model, cluster, precision, layout, batch, tokens/s/GPU."""
    rows, container, section, model = [], "", "", ""
    for line in text.splitlines():
        if line.startswith("## "):
            container = line[3:].strip()
        elif line.startswith("### "):
            section = line[4:].strip()
        elif line.startswith("#### Model:"):
            model = line.split(":", 1)[1].strip()
        elif line.startswith("| DGX") and section.startswith("Pre-Training"):
            cells = [x.strip() for x in line.strip().strip("|").split("|")]
            if len(cells) == 14:  # tables with an FSDP column
                cells = cells[:6] + cells[7:]
            system, gpus, precision, gbs, mbs, _seq, tp, pp, _cp, _vp, ep, tokens = cells[:12]
            try:
                measured = float(tokens.replace(",", ""))
            except ValueError:
                continue
            rows.append({"container": container, "model": model,
                         "cluster": f"{SYSTEMS.get(system, system.lower())}x{int(gpus)}",
                         "precision": PRECISIONS.get(precision.split()[0], precision.lower()),
                         "tp": int(tp), "pp": int(pp), "ep": int(ep) if ep.isdigit() else 1,
                         "gbs": int(gbs), "mbs": int(mbs), "measured": measured})
    return rows


def _key(row: dict) -> tuple:
    return (row["model"], row["cluster"], row["precision"], row["tp"], row["pp"], row["ep"], row["gbs"], row["mbs"])


def _case_key(case: dict) -> tuple:
    lay, tr = case["layout"], case["training"]
    return (case["model"]["name"], case["cluster"], tr["precision"], lay["tp"], lay["pp"], lay["ep"],
            tr["global_batch"], tr.get("micro_batch"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("archive", type=Path, help="docs/performance-summary-archive.md of Megatron-Bridge")
    args = parser.parse_args()
    cases = [c for c in load_cases(None) if "Megatron-Bridge" in c["source"] and "pre-training" in c["source"]]
    recipes = load_recipes(default_recipes_path(None))
    carried = {(m.group(1) if (m := CONTAINER.search(c["source"])) else "", *_case_key(c)) for c in cases}
    siblings: dict[tuple, dict] = {}
    for c in cases:
        siblings.setdefault(_case_key(c), c)
    priced, errors, no_sibling = [], [], 0
    for row in archive_rows(args.archive.read_text(encoding="utf-8")):
        if (row["container"], *_key(row)) in carried:
            continue
        sibling = siblings.get(_key(row))
        if sibling is None:
            no_sibling += 1
            continue
        case = copy.deepcopy(sibling)
        case["id"] = f"{sibling['id']}@{row['container'].split()[0]}"
        case["measured"] = {"tokens_per_s_per_gpu": row["measured"]}
        out = run_case(case, "archive", {case["id"]: copy.deepcopy(recipes.get(sibling["id"], {}))})
        if not out.get("predicted"):
            continue
        err = out["predicted"]["tokens_per_s_per_gpu"] / row["measured"] - 1.0
        priced.append((abs(err), err, row, sibling["id"]))
        errors.append(abs(err))
    priced.sort(key=lambda t: -t[0])
    p90 = statistics.quantiles(errors, n=10)[-1] if len(errors) >= 10 else max(errors, default=0.0)
    print(f"{len(priced)} archive rows priced with a sibling's knobs ({no_sibling} without a sibling): "
          f"median {statistics.median(errors):.1%}, P90 {p90:.1%} absolute error\n")
    print("| container | model | cluster | precision | measured | error | knobs of |")
    print("|---|---|---|---|---|---|---|")
    for _, err, row, sib in priced[:15]:
        print(f"| {row['container']} | {row['model']} | {row['cluster']} | {row['precision']} | "
              f"{row['measured']:,.0f} | {err:+.1%} | {sib} |")


if __name__ == "__main__":
    main()
