"""bench_overlap.py with the cuBLASLt selection as committed (VARIANT='' : tiles logged) or the
heuristic's first candidate everywhere (VARIANT=first), or AG-GEMM's consumer with the rule too (VARIANT=ag256)."""
import os, runpy, sys
import fluxlite._cublaslt as lt
v = os.environ.get("VARIANT", "")
_preferred = lt.preferred
def logged(tiles):
    pick = 0 if v == "first" else _preferred(tiles)
    print(f"tiles {tiles} -> {pick}", flush=True)
    return pick
lt.preferred = logged
if v == "ag256":  # AG-GEMM's matmul consumer with the GEMM-RS consumer's tile rule too
    _linear_into = lt.linear_into
    lt.linear_into = lambda out, x, weight, bias, alpha=1.0, rows_256=False: _linear_into(out, x, weight, bias, alpha, True)
sys.argv = ["scripts/bench_overlap.py"] + sys.argv[1:]
runpy.run_path("scripts/bench_overlap.py", run_name="__main__")
