"""A fused call's graph: its nodes by kind, the host time of its replay (graphs of 1 and 10 calls), its
device time against the eager call, and its result against the eager call's. With SIGNAL_AS_COPY=1 the
producer's flag writes to a peer are 4-byte copy-engine copies from a word holding SET instead of
cuStreamBatchMemOp writes.   torchrun --standalone --nproc-per-node 2 graph_census.py"""
import collections, ctypes, os, random, statistics, sys, time
sys.path.insert(0, os.getcwd())
import torch
import torch.distributed as dist
import fluxlite
from fluxlite import _cuda_driver as cu
from fluxlite import schedule as sch
from fluxlite.fused import producer
from fluxlite.workspace import get_workspace

tp = fluxlite.init()
W, rank = tp.world_size, tp.rank
dev = torch.device("cuda", torch.cuda.current_device())
VARIANT = os.environ.get("SIGNAL_AS_COPY") == "1"
SET_WORD = torch.full((1,), sch.SET, dtype=torch.int32, device=dev)

if VARIANT:
    orig_of = producer.Program.of.__func__

    def of(cls, steps, cuda=False, fed=False):
        if cuda:
            own = get_workspace(None, dev)._flag_addrs[rank]
            steps = [(producer.COPY, s[1], SET_WORD.data_ptr(), 4)
                     if s[0] == producer.SIGNAL and s[2] == sch.SET and not own <= s[1] < own + (1 << 20) else s
                     for s in steps]
        return orig_of(cls, steps, cuda, fed)

    producer.Program.of = classmethod(of)

lib = ctypes.CDLL("libcuda.so.1")
NAMES = {0: "kernel", 1: "memcpy", 2: "memset", 3: "host", 4: "graph", 5: "empty", 6: "wait_event",
         7: "event_record", 10: "mem_alloc", 11: "mem_free", 12: "batch_mem_op"}


def census(g):
    raw = ctypes.c_void_p(g.raw_cuda_graph())
    n = ctypes.c_size_t(0)
    assert lib.cuGraphGetNodes(raw, None, ctypes.byref(n)) == 0
    nodes = (ctypes.c_void_p * n.value)()
    assert lib.cuGraphGetNodes(raw, nodes, ctypes.byref(n)) == 0
    counts = collections.Counter()
    for node in nodes:
        t = ctypes.c_int()
        lib.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(t))
        counts[NAMES.get(t.value, t.value)] += 1
    return dict(counts)


def shapes(seed=7):
    rng = random.Random(seed)
    anchors = [("ag", 8192, 8192, 14336), ("rs", 8192, 14336, 8192), ("ag", 4096, 8192, 5120), ("rs", 4096, 4096, 8192)]
    extra = [(rng.choice(["ag", "rs"]), W * rng.randint(200, 3000), rng.choice([2048, 4096]),
              rng.choice([1536, 2816, 4096])) for _ in range(3)]
    return anchors + extra + [("ag", W * 64, 4096, 2048)]


def call_of(op, M, K, N):
    bf = torch.bfloat16
    if op == "ag":
        a, w = torch.randn(M // W, K, device=dev, dtype=bf), torch.randn(N // W, K, device=dev, dtype=bf)
        return lambda: fluxlite.ag_gemm(a, w, impl="fused")
    a, w = torch.randn(M, K // W, device=dev, dtype=bf), torch.randn(N, K // W, device=dev, dtype=bf)
    return lambda: fluxlite.gemm_rs(a, w, impl="fused")


def graph_of(fn, n):
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(g):
        outs = [fn() for _ in range(n)]
    g.instantiate()
    return g, outs


def host_us(fn, reps=30):
    out = []
    for _ in range(reps):
        torch.cuda.synchronize(); dist.barrier()
        torch.cuda._sleep(20_000_000)
        t = time.perf_counter(); fn(); out.append((time.perf_counter() - t) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out)


def device_ms(fn, reps=20):
    torch.cuda.synchronize(); dist.barrier()
    torch.cuda._sleep(50_000_000)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(reps):
        fn()
    e1.record(); torch.cuda.synchronize()
    return e0.elapsed_time(e1) / reps


print_rows = []
for op, M, K, N in shapes():
    fn = call_of(op, M, K, N)
    ref = fn().float(); torch.cuda.synchronize()
    g1, o1 = graph_of(fn, 1)
    g10, o10 = graph_of(fn, 10)
    nodes = census(g1)
    g1.replay(); g10.replay(); torch.cuda.synchronize()
    err = max((o.float() - ref).abs().max().item() for o in o1 + o10)
    ex1 = g1.raw_cuda_graph_exec()
    stream = torch.cuda.current_stream().cuda_stream
    res = dict(host_x1=host_us(g1.replay), host_x1_launch=host_us(lambda: cu.graph_launch(ex1, stream)),
               host_x10=host_us(g10.replay) / 10, host_eager=host_us(fn))
    t_eager = [device_ms(fn) for _ in range(3)]
    t_graph = [device_ms(g10.replay, 2) / 10 for _ in range(3)]
    for _ in range(50):  # replays again: the result must still match
        g10.replay()
    torch.cuda.synchronize()
    err = max(err, max((o.float() - ref).abs().max().item() for o in o10))
    fluxlite.synchronize()
    if rank == 0:
        print(f"{'copy-signal' if VARIANT else 'memop-signal'} {op} {M}x{K}->{N}: nodes {nodes}; host us x1 "
              f"{res['host_x1']:.1f} (launch only {res['host_x1_launch']:.1f}), x10 per call {res['host_x10']:.1f}, "
              f"eager {res['host_eager']:.1f}; tp ms eager {statistics.median(t_eager):.4f} replay "
              f"{statistics.median(t_graph):.4f}; max |replay - eager| {err:.3g}", flush=True)
    del g1, g10, o1, o10
    torch.cuda.synchronize()
fluxlite.release_workspaces()
dist.destroy_process_group()
