"""Inclusive host time per stage of a fused call (wrappers with perf_counter_ns; GPU kept busy)."""
import os, sys, time, statistics, functools, collections
import torch, torch.distributed as dist
sys.path.insert(0, os.getcwd())
import fluxlite
from fluxlite import ops, _cuda_driver as cu
import importlib
fcall, fag, frs, fstate, producer = (importlib.import_module('fluxlite.fused.'+m) for m in ('call','ag_gemm','gemm_rs','state','producer'))
kag, krs, klaunch, core = (importlib.import_module('fluxlite.kernels.'+m) for m in ('ag_gemm','gemm_rs','launch','gemm_core'))

acc = collections.defaultdict(int); cnt = collections.defaultdict(int)
def wrap(owner, name, label=None):
    f = getattr(owner, name, None)
    if f is None:
        print("no", owner, name); return; label = label or f"{getattr(owner,'__name__',owner)}.{name}"
    @functools.wraps(f)
    def w(*a, **k):
        t = time.perf_counter_ns()
        try: return f(*a, **k)
        finally: acc[label] += time.perf_counter_ns() - t; cnt[label] += 1
    setattr(owner, name, w)

def main():
    tp = fluxlite.init(); W = tp.world_size
    M, K, N = 2048, 4096, 4096
    a_ag = torch.randn(M // W, K, device="cuda", dtype=torch.bfloat16)
    w_ag = torch.randn(N // W, K, device="cuda", dtype=torch.bfloat16)
    a_rs = torch.randn(M, K // W, device="cuda", dtype=torch.bfloat16)
    w_rs = torch.randn(N, K // W, device="cuda", dtype=torch.bfloat16)
    fns = {"ag": lambda: fluxlite.ag_gemm(a_ag, w_ag, impl="fused"),
           "rs": lambda: fluxlite.gemm_rs(a_rs, w_rs, impl="fused")}
    for f in fns.values():
        for _ in range(5): f()
    torch.cuda.synchronize(); dist.barrier()
    # primitives
    s = torch.cuda.current_stream().cuda_stream; x = torch.zeros(64, dtype=torch.int32, device="cuda")
    def prim(label, f, n=200):
        torch.cuda._sleep(20_000_000); ts=[]
        for _ in range(n):
            t=time.perf_counter_ns(); f(); ts.append(time.perf_counter_ns()-t)
        torch.cuda.synchronize(); return label, statistics.median(ts)/1e3
    full = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    prims = [prim("matmul", lambda: torch.matmul(full, w_ag.t())),
             prim("ctypes write_value32", lambda: cu.stream_write_value32(s, x.data_ptr(), 1)),
             prim("ctypes memcpy 64B", lambda: cu.memcpy_async(s, x.data_ptr(), x.data_ptr()+128, 64)),
             prim("torch.empty 8MB", lambda: torch.empty(M, N//W, device="cuda", dtype=torch.bfloat16)),
             prim("x.zero_()", lambda: x.zero_()),
             prim("is_current_stream_capturing", lambda: torch.cuda.is_current_stream_capturing()),
             prim("cuda.is_available", lambda: torch.cuda.is_available()),
             prim("capturing(dev)", lambda: fluxlite.workspace.capturing(x.device)),
             prim("current raw stream", lambda: torch._C._cuda_getCurrentRawStream(0)),
             prim("current_device", lambda: torch.cuda.current_device()),
             prim("new_empty 8MB", lambda: full.new_empty((M, N//W))),
             prim("data_ptr+stride x7", lambda: [(full.data_ptr(), full.stride()) for _ in range(7)]),
             prim("no_grad enter/exit", lambda: torch.no_grad().__enter__()),
             prim("detach.contiguous", lambda: full.detach().contiguous()),
             prim("event record", lambda: cu.event_record(fstate._STATES and next(iter(fstate._STATES.values())).call_start.cuda_event, s))]
    for owner, name in [(fluxlite, "ag_gemm"), (fluxlite, "gemm_rs"), (ops, "check_ag_gemm"), (ops, "check_gemm_rs"),
                        (ops, "_ag_run"), (ops, "_rs_run"), (ops, "get_workspace"), (ops.fused, "state_of"),
                        (fag, "get_plan"), (frs, "get_plan"), (fstate.FusedState, "reserve"), (fstate.FusedState, "check"),
                        (fcall.Call, "__init__"), (fcall.Call, "program"), (fcall.Call, "views"), (fcall.Call, "run"),
                        (fcall.Call, "kernel_args"), (fcall.Call, "_replay"), (fcall.Call, "_enqueue"), (kag, "launch"), (krs, "launch"), (klaunch, "launch"),
                        (core, "tma_ok"), (core, "weight_operand"), (core, "num_programs"),
                        (core, "ensure_device_descriptor_allocator"),
                        (producer, "enqueue_on_stream"), (fstate.FusedState, "align"), (fstate.FusedState, "clear"),
                        (fstate.FusedState, "note_kernel_launch"), (fcall.Call, "replay_key"), (cu, "graph_launch"),
                        (ops.fused, "ag_gemm"), (ops.fused, "gemm_rs"), (ops.dispatch, "choose"), (fluxlite.workspace, "capturing"),
                        (ops, "resolve_group"), (ops, "check_operands"), (ops.epilogue, "check"), (ops, "resolve_timeout")]:
        wrap(owner, name, f"{owner.__name__.split('.')[-1]}.{name}")
    ops.ag_gemm = fluxlite.ag_gemm; ops.gemm_rs = fluxlite.gemm_rs
    res = {}
    for key, f in fns.items():
        ts=[]; per=[]
        for _ in range(100):
            acc.clear(); cnt.clear()
            torch.cuda._sleep(3_000_000)
            t=time.perf_counter_ns(); f(); ts.append(time.perf_counter_ns()-t)
            per.append(dict(acc))
        torch.cuda.synchronize(); dist.barrier()
        labels = set().union(*per)
        res[key] = (statistics.median(ts)/1e3, {k: (statistics.median([d.get(k, 0) for d in per])/1e3, sum(k in d for d in per)/100) for k in labels})
    if tp.rank == 0:
        for label, us in prims: print(f"prim {label:28s} {us:8.1f} us")
        for key, (med, d) in res.items():
            print(f"== {key}: median {med:.1f} us per call (instrumented)")
            for k, (us, c) in sorted(d.items(), key=lambda kv: -kv[1][0]):
                print(f"   {k:40s} {us:8.1f} us  x{c:g}")
    fluxlite.synchronize(); fluxlite.release_workspaces(); dist.destroy_process_group()

main()
