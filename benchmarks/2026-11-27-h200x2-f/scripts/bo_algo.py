"""bench_overlap.py as committed (VARIANT=even), or the split GEMMs with a FACTOR-times-taller GEMM's algorithm (VARIANT=whole)."""
import os, runpy, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if os.environ.get("VARIANT") == "whole":
    import algo_of
    algo_of.install()
sys.argv = ["scripts/bench_overlap.py"] + sys.argv[1:]
runpy.run_path("scripts/bench_overlap.py", run_name="__main__")
