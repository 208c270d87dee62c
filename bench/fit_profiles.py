"""Fit each framework profile's `kernel_efficiency` to the published runs (reproducible; prints, writes nothing).

For every training framework in the case file, scan kernel_efficiency over a grid and keep the value that minimises
the median absolute log error of predicted throughput over that framework's dense and MoE cases. This is the only
fitted number per framework; everything else in the cost model comes from cited sources. Usage:

    python bench/fit_profiles.py [--cases validation/published_runs.yaml]
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections import defaultdict
from dataclasses import replace

import planner.cost.profiles as profiles
from planner.validate import load_cases, run_case

GRID = [round(0.40 + 0.025 * i, 3) for i in range(25)]  # 0.40 .. 1.00


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=None)
    ap.add_argument("--moe", action="store_true", help="fit the expert imbalance on the MoE tier instead")
    args = ap.parse_args()
    cases = load_cases(args.cases)
    if args.moe:
        fit_moe(cases)
        return
    by_fw: dict[str, list[dict]] = defaultdict(list)
    for c in cases:
        if c.get("tier") == "dense" and c["measured"].get("tokens_per_s_per_gpu"):
            by_fw[c["training"]["framework"]].append(c)
    original = dict(profiles.PROFILES)
    for fw, group in sorted(by_fw.items()):
        name = fw if fw in original else "other"
        best = None
        for value in GRID:
            profiles.PROFILES[name] = replace(original[name], kernel_efficiency=value)
            errs = []
            for c in group:
                r = run_case(c, "fit")
                if r["predicted"]:
                    errs.append(abs(math.log(r["predicted"]["tokens_per_s_per_gpu"]
                                             / c["measured"]["tokens_per_s_per_gpu"])))
            score = statistics.median(errs) if errs else math.inf
            if best is None or score < best[1]:
                best = (value, score, len(errs))
        profiles.PROFILES[name] = original[name]
        print(f"{fw:20s} cases {best[2]:3d}  kernel_efficiency {best[0]:.3f}  median |log err| {best[1]:.3f}")


def fit_moe(cases: list[dict]) -> None:
    import planner.cost.step as step

    group = [c for c in cases if c.get("tier") == "moe" and c["measured"].get("tokens_per_s_per_gpu")]
    best = None
    for value in [1.0 + 0.1 * i for i in range(21)]:
        step.EXPERT_IMBALANCE = value
        errs = []
        for c in group:
            r = run_case(c, "fit")
            if r["predicted"]:
                ratio = r["predicted"]["tokens_per_s_per_gpu"] / c["measured"]["tokens_per_s_per_gpu"]
                errs.append(abs(math.log(ratio)))
        score = statistics.median(errs)
        if best is None or score < best[1]:
            best = (value, score, len(errs))
    print(f"moe cases {best[2]}  expert_imbalance {best[0]:.2f}  median |log err| {best[1]:.3f}")


if __name__ == "__main__":
    main()
