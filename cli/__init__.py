"""The `plan` command line (cli.main)."""

import os

# numpy's OpenBLAS starts a thread per core when imported (~0.05 s of CPU per run, more on a busy machine); the
# planner's arithmetic is elementwise numpy and never calls BLAS, so one thread gives the same bits. Set here, before
# any command imports numpy; a caller's own setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
