"""bench_overlap.py as committed (VARIANT=base), or with the peer-chunk GEMMs storing into the peers (VARIANT=remote)."""
import os, runpy, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if os.environ.get("VARIANT") == "remote":
    import remote
    remote.install()
sys.argv = ["scripts/bench_overlap.py"] + sys.argv[1:]
runpy.run_path("scripts/bench_overlap.py", run_name="__main__")
