"""bench_layers.py under diagnostics: faulthandler; DIAG_NO_GRAPHS=1 (no eager-call graphs);
DIAG_CTX=1 (check the thread's current CUDA context and device before every graph launch)."""
import ctypes, faulthandler, os, runpy, sys, threading
faulthandler.enable(all_threads=True)
import torch
import fluxlite._cuda_driver as cu
import fluxlite.fused.call as call
if os.environ.get("DIAG_NO_GRAPHS"):
    call.MAX_GRAPHS = 0
if os.environ.get("DIAG_CTX"):
    launch, seen = cu.graph_launch, set()
    def checked(exec_, stream):
        ctx = ctypes.c_void_p()
        cu._driver()["cuCtxGetCurrent"](ctypes.byref(ctx))
        dev = torch.cuda.current_device()
        prim = cu._primary_context(dev)
        key = (threading.get_ident(), ctx.value, dev, stream)
        if ctx.value != prim and key not in seen:
            seen.add(key)
            print(f"DIAG rank {os.environ.get('RANK')}: thread {threading.current_thread().name} ctx {ctx.value:#x} != primary of cuda:{dev} {prim:#x}; stream {stream:#x}", flush=True)
        return launch(exec_, stream)
    cu.graph_launch = checked
sys.argv = ["scripts/bench_layers.py"] + sys.argv[1:]
runpy.run_path("scripts/bench_layers.py", run_name="__main__")
