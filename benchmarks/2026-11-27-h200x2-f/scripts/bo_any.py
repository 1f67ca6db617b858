"""bench_overlap.py as committed (VARIANT=even), or the 128x256 tile wherever the heuristic offers it (VARIANT=any256)."""
import os, runpy, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if os.environ.get("VARIANT") == "any256":
    import any256 as algo_of
    algo_of.install()
sys.argv = ["scripts/bench_overlap.py"] + sys.argv[1:]
runpy.run_path("scripts/bench_overlap.py", run_name="__main__")
