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
from planner.evidence.validate import load_cases, run_case

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
    """Joint grid over the two MoE constants: expert load imbalance and the per-layer host overhead."""
    import planner.cost.expert as step

    group = [c for c in cases if c.get("tier") == "moe" and c["measured"].get("tokens_per_s_per_gpu")]
    best = None
    for sync in (0.0, 2e-4, 4e-4, 8e-4, 1.2e-3, 1.5e-3):
        for imbalance in (1.0, 1.1, 1.2, 1.4, 1.6, 1.8):
            step.MOE_HOST_OVERHEAD_S, step.EXPERT_IMBALANCE = sync, imbalance
            errs = []
            for c in group:
                r = run_case(c, "fit")
                if r["predicted"]:
                    ratio = r["predicted"]["tokens_per_s_per_gpu"] / c["measured"]["tokens_per_s_per_gpu"]
                    errs.append(abs(math.log(ratio)))
            score = statistics.median(errs)
            print(f"  host overhead {sync * 1e3:.1f} ms  imbalance {imbalance:.1f}  median |log err| {score:.3f}")
            if best is None or score < best[2]:
                best = (sync, imbalance, score, len(errs))
    print(f"moe cases {best[3]}  best host overhead {best[0] * 1e3:.1f} ms, imbalance {best[1]:.2f}, "
          f"median |log err| {best[2]:.3f} (a flat valley: prefer the physically plausible point near it)")


if __name__ == "__main__":
    main()
