"""Node kinds of a user's graph of one fused call, and host us of cuGraphLaunch and of g.replay()
with the device asleep (median of 40).   torchrun --nproc-per-node 2 graphnodes.py rs:8192,14336,8192 ..."""
import collections, ctypes, os, statistics, sys, time
import torch, torch.distributed as dist
import fluxlite
from fluxlite import _cuda_driver as drv
from fluxlite.profile.run import init_ranks, op_case
from fluxlite.profile.cli import parse_shape

KINDS = {0: "kernel", 1: "memcpy", 2: "memset", 3: "host", 4: "child", 5: "empty", 6: "wait_event",
         7: "event_record", 8: "sema_signal", 9: "sema_wait", 10: "alloc", 11: "free", 12: "batch_memop",
         13: "conditional"}
cu = ctypes.CDLL("libcuda.so.1")


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
    return dict(kinds)


def host_us(fn, reps=40, asleep=True):
    out = []
    for _ in range(reps):
        torch.cuda.synchronize(); dist.barrier()
        if asleep:
            torch.cuda._sleep(20_000_000)
        t = time.perf_counter(); fn(); out.append((time.perf_counter() - t) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out)


tp, dev = init_ranks(torch_symm_mem=False)
# the floor: graphs of one small kernel and of one GEMM, nothing of fluxlite's
small = torch.ones(16, device=dev); A = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
for name, fn in (("one add kernel", lambda: small.add_(1)), ("one matmul", lambda: A @ A)):
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(g):
        fn()
    g.instantiate(); g.replay(); torch.cuda.synchronize()
    s = torch.cuda.current_stream().cuda_stream; ex = g.raw_cuda_graph_exec()
    a, b, c = host_us(lambda: drv.graph_launch(ex, s)), host_us(g.replay), host_us(g.replay, asleep=False)
    if tp.rank == 0:
        print(f"floor, {name}: {anatomy(g.raw_cuda_graph())}; cuGraphLaunch {a:.1f} us, replay() {b:.1f} us, replay() on an idle device {c:.1f} us", flush=True)
    del g
for spec in sys.argv[1:]:
    shape = parse_shape(spec)[0]
    make, cases = op_case(shape, tp, torch.bfloat16, dev)
    x = make(); fused = cases["fused"]; seq = cases["sequential"]
    for _ in range(3): fused(x); seq(x)
    torch.cuda.synchronize()
    res = {}
    for name, fn in (("fused", fused), ("sequential", seq)):
        g = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(g):
            fn(x)
        g.instantiate()
        torch.cuda.synchronize()
        kinds = anatomy(g.raw_cuda_graph())
        g.replay(); torch.cuda.synchronize()
        s = torch.cuda.current_stream().cuda_stream
        ex = g.raw_cuda_graph_exec()
        res[name] = (kinds, host_us(lambda: drv.graph_launch(ex, s)), host_us(g.replay), host_us(lambda: fn(x)),
                     host_us(g.replay, asleep=False))
        del g
    if tp.rank == 0:
        for name, (kinds, launch, replay, eager, idle) in res.items():
            print(f"{spec} {name}: {sum(kinds.values())} nodes {kinds}; cuGraphLaunch {launch:.1f} us, replay() {replay:.1f} us, "
                  f"replay() on an idle device {idle:.1f} us, eager call {eager:.1f} us", flush=True)
    del x, make, cases, fused, seq
    torch.cuda.synchronize(); dist.barrier()
    fluxlite.release_workspaces()
fluxlite.release_workspaces()
dist.destroy_process_group()
