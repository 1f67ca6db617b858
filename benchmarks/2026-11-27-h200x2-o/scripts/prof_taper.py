"""fluxlite-profile under torchrun with GEMM-AllReduce's split weights from TAPER (e.g. TAPER=1,3,3,1)
set before any plan is built: torchrun --nproc-per-node 2 prof_taper.py <fluxlite-profile arguments>."""
import os
import sys

sys.path.insert(0, os.getcwd())
import fluxlite.schedule as sch  # noqa: E402

if os.environ.get("TAPER"):
    sch.TAPER = tuple(int(w) for w in os.environ["TAPER"].split(","))
from fluxlite.profile.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
