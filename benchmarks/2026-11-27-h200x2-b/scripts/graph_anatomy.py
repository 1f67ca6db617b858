"""Node kinds of a user graph holding 1 and 10 fused calls at bench_graphs.py's shapes, and the host
time of cuGraphLaunch on it (device asleep), median/min of 40.
  torchrun --standalone --nproc-per-node 2 graph_anatomy.py"""
import collections, ctypes, os, statistics, sys, time
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.path.join(os.getcwd(), "scripts"))
import torch, torch.distributed as dist
import fluxlite
from fluxlite import _cuda_driver as drv
from bench_graphs import _shapes, _calls

KINDS = {0: "kernel", 1: "memcpy", 2: "memset", 3: "host", 4: "child", 5: "empty", 6: "wait_event",
         7: "event_record", 8: "sema_signal", 9: "sema_wait", 10: "alloc", 11: "free", 12: "batch_memop",
         13: "conditional"}
cu = ctypes.CDLL("libcuda.so.1")
tp = fluxlite.init()
W, rank = tp.world_size, tp.rank


def anatomy(raw):
    n = ctypes.c_size_t(0)
    assert cu.cuGraphGetNodes(ctypes.c_void_p(raw), None, ctypes.byref(n)) == 0
    nodes = (ctypes.c_void_p * n.value)()
    assert cu.cuGraphGetNodes(ctypes.c_void_p(raw), nodes, ctypes.byref(n)) == 0
    kinds = collections.Counter()
    for nd in nodes:
        t = ctypes.c_int(0)
        cu.cuGraphNodeGetType(ctypes.c_void_p(nd), ctypes.byref(t))
        kinds[KINDS.get(t.value, t.value)] += 1
    e = ctypes.c_size_t(0)
    cu.cuGraphGetEdges(ctypes.c_void_p(raw), None, None, ctypes.byref(e))
    return dict(kinds), e.value


def launch_us(ex, reps=40):
    s = torch.cuda.current_stream().cuda_stream
    out = []
    for _ in range(reps):
        torch.cuda.synchronize(); dist.barrier()
        torch.cuda._sleep(20_000_000)
        t = time.perf_counter(); drv.graph_launch(ex, s); out.append((time.perf_counter() - t) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out), min(out)


for op, M, K, N in _shapes(7, W):
    fn = _calls(op, M, K, N, W, "fused")
    fn(); torch.cuda.synchronize()
    res = []
    for n in (1, 10):
        g = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(g):
            for _ in range(n):
                fn()
        g.instantiate() if hasattr(g, "instantiate") else None
        torch.cuda.synchronize()
        kinds, edges = anatomy(g.raw_cuda_graph())
        g.replay(); torch.cuda.synchronize()
        med, mn = launch_us(g.raw_cuda_graph_exec())
        res.append(f"x{n}: {sum(kinds.values())} nodes {edges} edges {kinds} launch {med:.1f} (min {mn:.1f}) us")
        del g
    if rank == 0:
        print(f"{op} {M}x{K}->{N}:\n  " + "\n  ".join(res), flush=True)
fluxlite.release_workspaces()
dist.destroy_process_group()
