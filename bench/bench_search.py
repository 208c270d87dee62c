"""End-to-end planning time, process start included (what a user waits for). Prints medians over N runs: wall
time, and the process's CPU time (user + system), which a machine shared with other jobs inflates less. With
`--base DIR` (another checkout, e.g. a worktree of main) each case runs there and here in turn, so both columns
see the same load.

    python bench/bench_search.py [-n 7] [--base ../main]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time

CASES = [
    ("llama3-70b on h100x512", ["--model", "llama70b", "--cluster", "h100x512"]),
    ("llama3-405b on h100x16384", ["--model", "llama405b", "--cluster", "h100x16384", "--global-batch", "2048"]),
    ("mixtral-8x22b on h100x1024", ["--model", "mixtral-8x22b", "--cluster", "h100x1024"]),
    ("deepseek-v3 on h800x2048", ["--model", "deepseek-v3", "--cluster", "h800x2048", "--seq-len", "4096",
                                   "--global-batch", "4096"]),
    ("deepseek-v3 fp8 on h800x2048", ["--model", "deepseek-v3", "--cluster", "h800x2048", "--seq-len", "4096",
                                       "--global-batch", "15360", "--precision", "fp8"]),
    ("qwen3-235b-a22b on h100x256", ["--model", "qwen3-235b-a22b", "--cluster", "h100x256", "--seq-len", "4096",
                                      "--global-batch", "2048"]),
    ("kimi-k2 on h800x2048", ["--model", "kimi-k2", "--cluster", "h800x2048", "--seq-len", "4096",
                               "--global-batch", "4096"]),
    ("llama4-maverick on gb200x256", ["--model", "llama4-maverick", "--cluster", "gb200x256"]),
    ("gpt-oss-120b on b200x64", ["--model", "gpt-oss-120b", "--cluster", "b200x64", "--seq-len", "4096",
                                  "--global-batch", "1280"]),
    # the slowest of every catalog model on h100x64, h100x1024, gb200x256, h800x2048 and b200x64 (2026-11)
    ("llama4-maverick on h800x2048", ["--model", "llama4-maverick", "--cluster", "h800x2048"]),
    ("llama4-maverick on h100x64 (no fit)", ["--model", "llama4-maverick", "--cluster", "h100x64"]),
    ("deepseek-v3 on h100x64 (no fit)", ["--model", "deepseek-v3", "--cluster", "h100x64"]),
]


def _run(argv: list[str], cwd: str | None) -> tuple[float, float, int, bytes]:
    """(wall s, CPU s, exit code, stderr) of one `plan ... --format json` run in `cwd`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "cli.main", *argv, "--format", "json"], capture_output=True, cwd=cwd)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, r.returncode, r.stderr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=7)
    ap.add_argument("--base", help="another checkout to time in turn with this one (its medians printed first)")
    args = ap.parse_args()
    trees = [args.base, None] if args.base else [None]
    head = "  ".join(f"{'median s':>9s} {'min s':>7s} {'max s':>7s} {'cpu s':>7s}" for _ in trees)
    print(f"{'case':36s} {head}  (n={args.n}, python {sys.version.split()[0]}{', base | this' if args.base else ''})")
    for label, argv in CASES:
        times: list[list[float]] = [[] for _ in trees]
        cpus: list[list[float]] = [[] for _ in trees]
        for _ in range(args.n):
            for i, cwd in enumerate(trees):
                wall, cpu, rc, err = _run(argv, cwd)
                if rc not in (0, 1):
                    raise SystemExit(f"{label}: exit {rc}: {err.decode()[-300:]}")
                times[i].append(wall)
                cpus[i].append(cpu)
        print(f"{label:36s} " + "  ".join(f"{statistics.median(t):9.2f} {min(t):7.2f} {max(t):7.2f} "
                                          f"{statistics.median(c):7.2f}" for t, c in zip(times, cpus, strict=True)))


if __name__ == "__main__":
    main()
