"""Anatomy of a replayed fused call's graph: node count by type, and cuGraphLaunch host time of it
against a one-kernel graph and graphs of n memset nodes (GPU kept busy so launches never block).

--launches N --skip S: each graph's launch time is the median of launches S+1..N (ninth session:
20 and 2, fewer than fill the launch queue, which blocks; the eighth session's 300 and 0 blocked on
the fused graphs). --no-refs: no reference graphs (the ninth session's fluxlite has no memset helper)."""
import argparse, os, sys, time, ctypes, statistics, collections
sys.path.insert(0, os.getcwd())
import torch, torch.distributed as dist
import fluxlite
from fluxlite import _cuda_driver as cu
from fluxlite.fused.state import Replay, _STATES

ap = argparse.ArgumentParser()
ap.add_argument("--launches", type=int, default=300); ap.add_argument("--skip", type=int, default=0)
ap.add_argument("--no-refs", action="store_true")
ap.add_argument("--shape", default="2048,4096,4096", help="M,K,N (ninth session; the eighth's was the default)")
args = ap.parse_args()
lib = ctypes.CDLL("libcuda.so.1")
_Graph = torch.cuda.CUDAGraph
class KeepGraph(_Graph):  # keep the cudaGraph_t so its nodes can be listed
    def __new__(cls, keep_graph=False):
        return super().__new__(cls, keep_graph=True)
    def __init__(self, keep_graph=False):
        super().__init__(keep_graph=True)
    def capture_end(self):
        super().capture_end()
        self.instantiate()
torch.cuda.CUDAGraph = KeepGraph
TYPES = {0: "kernel", 1: "memcpy", 2: "memset", 3: "host", 4: "child", 5: "empty", 6: "wait_event", 7: "event_record",
         8: "ext_sem_signal", 9: "ext_sem_wait", 10: "mem_alloc", 11: "mem_free", 12: "batch_mem_op", 13: "conditional"}

def anatomy(graph):
    g = ctypes.c_void_p(graph.raw_cuda_graph())
    n = ctypes.c_size_t(0)
    assert lib.cuGraphGetNodes(g, None, ctypes.byref(n)) == 0
    nodes = (ctypes.c_void_p * n.value)()
    assert lib.cuGraphGetNodes(g, nodes, ctypes.byref(n)) == 0
    kinds = collections.Counter()
    for node in nodes:
        t = ctypes.c_int(0); lib.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(t)); kinds[TYPES.get(t.value, t.value)] += 1
    return n.value, dict(kinds)

FIRST = {}
def launch_us(exec_, n=args.launches, name=None):
    s = torch.cuda.current_stream().cuda_stream
    ts = []
    torch.cuda._sleep(50_000_000)
    for _ in range(n):
        t0 = time.perf_counter(); cu.graph_launch(exec_, s); ts.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    if name: FIRST[name] = [round(1e6 * t, 1) for t in ts[:24]]
    return 1e6 * statistics.median(ts[args.skip:])

tp = fluxlite.init(); W = tp.world_size
bf = torch.bfloat16
M, K, N = map(int, args.shape.split(","))
a = torch.randn(M // W, K, device="cuda", dtype=bf); w = torch.randn(N // W, K, device="cuda", dtype=bf)
a_rs = torch.randn(M, K // W, device="cuda", dtype=bf); w_rs = torch.randn(N, K // W, device="cuda", dtype=bf)
for _ in range(6):
    fluxlite.ag_gemm(a, w, impl="fused"); fluxlite.ag_gemm(a, w, impl="fused", return_gathered=True); fluxlite.gemm_rs(a_rs, w_rs, impl="fused")
fluxlite.synchronize(); dist.barrier()
state = next(iter(_STATES.values()))
rows = []
for key, plan in state.plans.items():
    for rkey, g in plan.bound.graphs.items():
        if isinstance(g, Replay):
            n, kinds = anatomy(g.graph)
            name = f"{key[0]} keep={key[5]} parity={rkey[0]} splits={plan.sched.splits}"
            rows.append((name, n, kinds, launch_us(g.exec, name=name)))
# references: one tiny kernel; n memsets
x = torch.zeros(1024, device="cuda")
refs = []
for k in () if args.no_refs else (1, 4, 8, 16):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(k):
            x[i:i+1].add_(1.0)
    refs.append((f"{k} add_ kernels", k, launch_us(g.raw_cuda_graph_exec())))
    g2 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g2):
        for i in range(k):
            cu.memset32_async(torch.cuda.current_stream().cuda_stream, x.data_ptr() + 4 * i, 0, 1)
    refs.append((f"{k} memset nodes", k, launch_us(g2.raw_cuda_graph_exec(), name=f"{k} memsets")))
if tp.rank == 0:
    print("fused graphs found:", len(rows))
    for name, n, kinds, us in rows:
        print(f"graph {name:40s} nodes {n:3d} {kinds}  launch {us:6.1f} us")
    for name, n, us in refs:
        print(f"ref   {name:40s} nodes {n:3d}  launch {us:6.1f} us")
    for name, ts in FIRST.items():
        print(f"first launches {name}: {ts}")
fluxlite.synchronize(); fluxlite.release_workspaces(); dist.destroy_process_group()
