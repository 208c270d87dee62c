"""The `plan` command line (cli.main). Four process settings for its short numpy-heavy runs, none changing a
result: set here, before any command imports numpy or pydantic."""

import ctypes
import os
import sys
import types

# numpy's OpenBLAS starts a thread per core when imported (~0.05 s of CPU per run, more on a busy machine); the
# planner's arithmetic is elementwise numpy and never calls BLAS, so one thread gives the same bits. A caller's own
# setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# pydantic looks for plugins in every installed distribution's entry points when it builds its first validator
# (~7 ms per run); the planner uses none. A caller's own setting wins here too.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "1")


def _skip_plugin_loader() -> None:
    """pydantic imports its plugin loader when it builds its first validator, and the loader imports
    importlib.metadata (email, zipfile, ...: ~14 ms per run) for an entry-point scan it skips when plugins are off:
    its get_plugins() returns () for PYDANTIC_DISABLE_PLUGINS 1, true or __all__. The same answer without the
    import; under any other setting (or once pydantic has loaded its own) nothing changes.
    tests/test_startup.py checks that a plain plan then imports no package metadata and answers the same."""
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") not in ("1", "true", "__all__") or \
            "pydantic.plugin._loader" in sys.modules:
        return
    loader = types.ModuleType("pydantic.plugin._loader", "get_plugins() is () while plugins are off (cli/__init__.py)")
    loader.get_plugins = tuple  # type: ignore[attr-defined]  # () on every call
    sys.modules["pydantic.plugin._loader"] = loader


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


_skip_plugin_loader()
_reuse_freed_memory()
