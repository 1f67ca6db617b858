"""bench_overlap.py with one variant of the matmul consumer (VARIANT env): '' as shipped,
'torchblas' (torch's cuBLAS with its workspace instead of cuBLASLt without), 'splitsN' (N splits)."""
import os, runpy, sys
v = os.environ.get("VARIANT", "")
if v == "torchblas":
    import fluxlite._cublaslt as lt
    lt._library = lambda: None
elif v == "untuned":  # the heuristic's first algorithm everywhere, as before the timed choice
    import contextlib
    import fluxlite._cublaslt as lt
    lt.choosing_by_time = lambda device: contextlib.nullcontext()
elif v in ("second", "first"):  # the heuristic's second candidate (PICK=1), or the first with its config printed
    sys.path.insert(0, os.path.dirname(__file__))
    import second_algo
    os.environ["PICK"] = "1" if v == "second" else "0"
    import torch
    torch.cuda.init()
    second_algo.install()
elif v == "tuned":
    sys.path.insert(0, os.path.dirname(__file__))
    import tuned_plan
    tuned_plan.install()
elif v.startswith("splits"):
    import fluxlite.ops.gemm_rs as g
    g.MATMUL_SPLITS = int(v[6:])
sys.argv = ["scripts/bench_overlap.py"] + sys.argv[1:]
runpy.run_path("scripts/bench_overlap.py", run_name="__main__")
