"""End-to-end planning time, process start included (what a user waits for). Prints medians over N runs: wall
time, and the process's CPU time (user + system), which a machine shared with other jobs inflates less.

    python bench/bench_search.py [-n 7]
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=7)
    args = ap.parse_args()
    print(f"{'case':36s} {'median s':>9s} {'min s':>7s} {'max s':>7s} {'cpu s':>7s}  (n={args.n}, python "
          f"{sys.version.split()[0]})")
    for label, argv in CASES:
        times, cpus = [], []
        for _ in range(args.n):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "cli.main", *argv, "--format", "json"], capture_output=True)
            times.append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            if r.returncode not in (0, 1):
                raise SystemExit(f"{label}: exit {r.returncode}: {r.stderr.decode()[-300:]}")
        print(f"{label:36s} {statistics.median(times):9.2f} {min(times):7.2f} {max(times):7.2f} "
              f"{statistics.median(cpus):7.2f}")


if __name__ == "__main__":
    main()
