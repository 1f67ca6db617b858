"""bench_overlap.py as committed (VARIANT=''), or with split_align installed (VARIANT=align)."""
import os, runpy, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if os.environ.get("VARIANT") == "align":
    import split_align
    split_align.install()
sys.argv = ["scripts/bench_overlap.py"] + sys.argv[1:]
runpy.run_path("scripts/bench_overlap.py", run_name="__main__")
