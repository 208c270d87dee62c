"""The `plan` command line (cli.main). Three process settings for its short numpy-heavy runs, none changing a
result: set here, before any command imports numpy or pydantic."""

import ctypes
import os
import sys

# numpy's OpenBLAS starts a thread per core when imported (~0.05 s of CPU per run, more on a busy machine); the
# planner's arithmetic is elementwise numpy and never calls BLAS, so one thread gives the same bits. A caller's own
# setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# pydantic looks for plugins in every installed distribution's entry points when it builds its first validator
# (~7 ms per run); the planner uses none. A caller's own setting wins here too.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "1")


def _reuse_freed_memory() -> None:
    """glibc serves each large numpy temporary (one per operation on a column of a few hundred thousand layouts)
    with a fresh mmap and unmaps it on free, so the next one faults its pages in again: ~0.1 s of system time on the
    largest searches. Up to 32 MiB blocks from the heap, kept after free (trim above 1 GiB), are reused instead; a
    CLI process is short-lived. mallopt (M_MMAP_THRESHOLD -3, M_TRIM_THRESHOLD -1) is glibc's; elsewhere nothing
    changes."""
    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(-3, 32 << 20)
    mallopt(-1, 1 << 30)


_reuse_freed_memory()
