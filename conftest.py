"""Suite-wide settings, loaded before any test module (and so before torch is imported).

One OpenMP thread per process: the suite's models are tiny, and on a busy 2-core machine (CI,
or a laptop doing other work) torch's thread pools spin-wait and stall. Measured on the 2-core
development machine with one other test process running: the SFT smoke test took over 300 s
with two threads and 92 s with one. Subprocesses (the CLI tests) inherit the setting.
"""

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
