"""Inclusive host time per stage of a repeated fused call (wrappers with perf_counter_ns; GPU kept busy).
torchrun ... host_pieces.py M,K,N [M,K,N ...]"""
import os, sys, time, statistics, functools, collections, importlib
import torch, torch.distributed as dist
sys.path.insert(0, os.getcwd())
import fluxlite
from fluxlite import ops, _cuda_driver as cu, workspace as wsmod, _validate
fcall, fag, frs, fstate = (importlib.import_module('fluxlite.fused.' + m) for m in ('call', 'ag_gemm', 'gemm_rs', 'state'))
acc = collections.defaultdict(int)
def wrap(owner, name, label):
    f = getattr(owner, name)
    @functools.wraps(f)
    def w(*a, **k):
        t = time.perf_counter_ns()
        try: return f(*a, **k)
        finally: acc[label] += time.perf_counter_ns() - t
    setattr(owner, name, w)

def host(f, n=60, sleep=3_000_000):
    ts, per = [], []
    for _ in range(n):
        acc.clear(); torch.cuda._sleep(sleep)
        t = time.perf_counter_ns(); f(); ts.append(time.perf_counter_ns() - t); per.append(dict(acc))
    torch.cuda.synchronize(); dist.barrier()
    labels = set().union(*per)
    return statistics.median(ts) / 1e3, {k: statistics.median([d.get(k, 0) for d in per]) / 1e3 for k in labels}

def main():
    tp = fluxlite.init(); W = tp.world_size
    shapes = [tuple(map(int, s.split(","))) for s in sys.argv[1:]] or [(2048, 4096, 4096)]
    instrument = os.environ.get("INSTR") == "1"
    fns = {}
    for M, K, N in shapes:
        a_ag = torch.randn(M // W, K, device="cuda", dtype=torch.bfloat16)
        w_ag = torch.randn(N // W, K, device="cuda", dtype=torch.bfloat16)
        a_rs = torch.randn(M, K // W, device="cuda", dtype=torch.bfloat16)
        w_rs = torch.randn(N, K // W, device="cuda", dtype=torch.bfloat16)
        full = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        fns[f"{M},{K},{N} matmul"] = lambda full=full, w=w_ag: torch.matmul(full, w.t())
        fns[f"{M},{K},{N} ag"] = lambda a=a_ag, w=w_ag: fluxlite.ag_gemm(a, w, impl="fused")
        fns[f"{M},{K},{N} ag_pull"] = lambda a=a_ag, w=w_ag: fluxlite.ag_gemm(a, w, impl="fused", return_gathered=True)
        fns[f"{M},{K},{N} rs"] = lambda a=a_rs, w=w_rs: fluxlite.gemm_rs(a, w, impl="fused")
    for f in fns.values():
        for _ in range(6): f()
    torch.cuda.synchronize(); dist.barrier()
    if instrument:
        for owner, name in [(ops, "_repeat"), (ops, "operands_as_used"), (fag, "ag_gemm"), (frs, "gemm_rs"),
                            (fstate.FusedState, "check"), (fcall.Call, "__init__"), (fcall.Call, "views"),
                            (fcall.Call, "replay_key"), (fcall.Call, "run"), (fcall.Call, "_replay"),
                            (cu, "graph_launch"), (wsmod, "capturing"), (cu, "ensure_context"), (fstate.FusedState, "next_epoch")]:
            wrap(owner, name, f"{owner.__name__.split('.')[-1]}.{name}")
        fcall.cu = cu; ops.operands_as_used = ops.operands_as_used
    res = {k: host(f) for k, f in fns.items()}
    for _ in range(2):
        res2 = {k: host(f) for k, f in fns.items()}
        res = {k: (min(res[k][0], res2[k][0]), res[k][1]) for k in res}
    t = torch.tensor([v[0] for v in res.values()], device="cuda"); dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if tp.rank == 0:
        for (k, (med, d)), mx in zip(res.items(), t.tolist()):
            mm = res[k.split()[0] + " matmul"][0]
            print(f"== {k:24s} {med:7.1f} us (max over ranks {mx:7.1f}; x matmul {med / mm:.2f})")
            for lab, us in sorted(d.items(), key=lambda kv: -kv[1]):
                print(f"     {lab:32s} {us:7.1f}")
    fluxlite.synchronize(); fluxlite.release_workspaces(); dist.destroy_process_group()
main()
