"""bench_overlap.py as it stands (VARIANT=unit), or with every split cut evenly (VARIANT=even)."""
import os, runpy, sys
if os.environ.get("VARIANT") == "even":
    from fluxlite.ops.gemm_rs import GemmReduceScatter
    GemmReduceScatter.split_unit = lambda self, *a: 1
sys.argv = ["scripts/bench_overlap.py"] + sys.argv[1:]
runpy.run_path("scripts/bench_overlap.py", run_name="__main__")
