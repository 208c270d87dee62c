"""Planning time at 16k, 64k and 100k GPUs, feasible and infeasible problems (issue 27: any problem up to 100k GPUs
answered in under 2 s). End to end, process start included, as bench_search.py: medians over N runs of wall time
and of the process's CPU time (user + system), which a machine shared with other jobs inflates less. An infeasible
case also checks that its one-line answer names the nearest feasible problem.

    python bench/bench_scale.py [-n 5] [--base ../main]

With `--base DIR` each case runs there and here in turn (the base's medians first).
"""

from __future__ import annotations

import argparse
import statistics
import sys

from bench_search import _run

# (label, plan arguments, feasible?). The infeasible ones have a GPU count whose odd factor no layout takes: 16,200 =
# 2^3 x 3^4 x 5^2, 65,000 = 2^3 x 5^4 x 13 and 100,000 = 2^5 x 5^5 against 126 layers (pp), 8 KV heads (tp), a
# 8192-token sequence (cp) and a power-of-two batch (dp).
CASES = [
    ("llama3-405b on h100x16384", ["--model", "llama3-405b", "--cluster", "h100x16384", "--global-batch", "2048"],
     True),
    ("llama3-405b on h100x16200 (no layout)", ["--model", "llama3-405b", "--cluster", "h100x16200"], False),
    ("llama3-405b on h100x65536", ["--model", "llama3-405b", "--cluster", "h100x65536", "--global-batch", "4096"],
     True),
    ("deepseek-v3 on h800x65536", ["--model", "deepseek-v3", "--cluster", "h800x65536", "--global-batch", "16384"],
     True),
    ("llama3-405b on h100x65000 (no layout)", ["--model", "llama3-405b", "--cluster", "h100x65000",
                                               "--global-batch", "4096"], False),
    ("llama3-405b on h100x98304", ["--model", "llama3-405b", "--cluster", "h100x98304"], True),
    ("llama3-405b on h100x100000 (no layout)", ["--model", "llama3-405b", "--cluster", "h100x100000"], False),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--base", help="another checkout to time in turn with this one (its medians printed first)")
    args = ap.parse_args()
    trees = [args.base, None] if args.base else [None]
    head = "  ".join(f"{'median s':>9s} {'cpu s':>7s}" for _ in trees)
    print(f"{'case':40s} {head}  (n={args.n}, python {sys.version.split()[0]}{', base | this' if args.base else ''})")
    for label, argv, feasible in CASES:
        walls: list[list[float]] = [[] for _ in trees]
        cpus: list[list[float]] = [[] for _ in trees]
        for _ in range(args.n):
            for i, cwd in enumerate(trees):
                wall, cpu, rc, err = _run(argv, cwd)
                if rc != (0 if feasible else 1):
                    raise SystemExit(f"{label}: exit {rc}: {err.decode()[-300:]}")
                if not feasible and cwd is None and b"nearest feasible:" not in err.splitlines()[0]:
                    raise SystemExit(f"{label}: no nearest feasible problem named: {err.decode()[:300]}")
                walls[i].append(wall)
                cpus[i].append(cpu)
        print(f"{label:40s} " + "  ".join(f"{statistics.median(w):9.2f} {statistics.median(c):7.2f}"
                                          for w, c in zip(walls, cpus, strict=True)))


if __name__ == "__main__":
    main()
