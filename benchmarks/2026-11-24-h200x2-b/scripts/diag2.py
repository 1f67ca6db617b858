"""bench_layers.py with graph-lifetime diagnostics: every captured exec is tracked; a launch of an exec
whose CUDAGraph is gone, or on another thread/device than its capture, is printed before launching."""
import faulthandler, os, runpy, sys, threading, weakref, traceback, collections
faulthandler.enable(all_threads=True)
import torch
import fluxlite._cuda_driver as cu
import fluxlite.fused.state as st
R = os.environ.get("RANK")
info, dead, counts = {}, {}, collections.Counter()
cap = st.FusedState.capture
def capture(self, enqueue):
    rep = cap(self, enqueue)
    e = rep.exec
    if e in info:
        print(f"DIAG r{R}: exec {e:#x} reused (old {info[e]})", flush=True)
    info[e] = (threading.current_thread().name, torch.cuda.current_device(), id(self), len(info))
    dead.pop(e, None)
    weakref.finalize(rep.graph, lambda e=e: dead.__setitem__(e, "".join(traceback.format_stack(limit=12))))
    return rep
st.FusedState.capture = capture
launch = cu.graph_launch
def checked(exec_, stream):
    counts[exec_] += 1
    if exec_ in dead:
        print(f"DIAG r{R}: launching DESTROYED exec {exec_:#x} info {info.get(exec_)}; destroyed at:\n{dead[exec_]}", flush=True)
    elif exec_ not in info:
        print(f"DIAG r{R}: launching UNKNOWN exec {exec_:#x}", flush=True)
    else:
        t, d, s, n = info[exec_]
        if t != threading.current_thread().name or d != torch.cuda.current_device():
            print(f"DIAG r{R}: exec {exec_:#x} captured on {t}/cuda:{d}, launched on {threading.current_thread().name}/cuda:{torch.cuda.current_device()}", flush=True)
    if os.environ.get("DIAG_SYNC"):
        torch.cuda.synchronize()
    r = launch(exec_, stream)
    if os.environ.get("DIAG_SYNC"):
        torch.cuda.synchronize()
    return r
cu.graph_launch = checked
import atexit
atexit.register(lambda: print(f"DIAG r{R}: {len(info)} graphs, {sum(counts.values())} launches, {len(dead)} destroyed", flush=True))
sys.argv = ["scripts/bench_layers.py"] + sys.argv[1:]
runpy.run_path("scripts/bench_layers.py", run_name="__main__")
