"""Prototype: GEMM-RS and GEMM-AR as cuBLAS sub-GEMMs in a ring, the reduction folded into addmm's C
input, the partials moved by the copy engine (torchrun, W ranks). Timing against cuBLAS, the limit,
matmul+NCCL and fluxlite's fused op, interleaved (fluxlite.timing)."""
import os, sys, json, math
sys.path.insert(0, os.getcwd())
import torch, torch.distributed as dist
import fluxlite
from fluxlite import _cuda_driver as cu
from fluxlite.timing import Timer, time_rounds
from fluxlite.workspace import SymmetricWorkspace
from fluxlite.profile.limit import limit_case

tp = fluxlite.init()
rank, W = dist.get_rank(), tp.world_size
dev = torch.device("cuda", torch.cuda.current_device())
cu.ensure_context(dev.index)
E = 2
KEYS = iter(range(10**6))


class Ring:
    """op 'rs' -> out [M/W, N]; op 'ar' -> out [M, N]."""
    def __init__(self, op, M, K, N, S, streams=1, split_only=False):
        self.op, self.M, self.N, self.S = op, M, N, S
        self.streams, self.split_only = streams, split_only
        self.own = torch.cuda.Stream(device=dev)
        self.mc = M // W
        self.sub = -(-self.mc // S)
        self.ws = SymmetricWorkspace(tp, dev, f"proto/{next(KEYS)}", 60.0)
        steps = W - 1
        self.recv_bytes = steps * self.mc * N * E
        gather_bytes = M * N * E if op == "ar" else 0
        self.ws.reserve(self.recv_bytes + gather_bytes + 4096)
        assert 2 * W * S * 2 <= self.ws.num_flags, self.ws.num_flags
        self.send = torch.empty(max(steps, 1), self.mc, N, device=dev, dtype=torch.bfloat16)
        self.side = torch.cuda.Stream(device=dev, priority=-1)
        self.epoch = 0
        self.prev = (rank - 1) % W
        self.events = [torch.cuda.Event() for _ in range(W * S)]

    def rows(self, j):
        lo = j * self.sub
        return lo, min(lo + self.sub, self.mc)

    def recv_addr(self, who, P, s, lo):  # step s >= 1 input of rank `who`
        return self.ws.data_addr(who, P) + ((s - 1) * self.mc + lo) * self.N * E

    def gather_addr(self, who, P, row):
        return self.ws.data_addr(who, P) + self.recv_bytes + row * self.N * E

    def slot(self, P, kind, s, j):
        return ((P * 2 + kind) * W + s) * self.S + j

    def __call__(self, x):
        a, w, out = x["a"], x["w"], x["o"]
        self.epoch += 1
        e, P = self.epoch, self.epoch % 2
        main = torch.cuda.current_stream()
        h_side = self.side.cuda_stream
        h_main = main.cuda_stream
        wt = w.t()
        if self.split_only:
            for s in range(W):
                c = (rank + s + 1) % W
                for j in range(self.S):
                    lo, hi = self.rows(j)
                    torch.matmul(a[c * self.mc + lo: c * self.mc + hi], wt, out=self.send[0, lo:hi])
            return out
        caller = main
        self.side.wait_stream(main)
        if self.streams == 2:
            self.own.wait_stream(main)
        own_rows0 = rank * self.mc
        for s in range(W):
            c = (rank + s + 1) % W
            for j in range(self.S):
                lo, hi = self.rows(j)
                if lo >= hi:
                    continue
                aj = a[c * self.mc + lo: c * self.mc + hi]
                if s == W - 1:
                    dst = out[lo:hi] if self.op == "rs" else out[own_rows0 + lo: own_rows0 + hi]
                else:
                    dst = self.send[s, lo:hi]
                if s == W - 1 and self.streams == 2 and main is caller:
                    main = self.own
                    h_main = main.cuda_stream
                    torch.cuda.set_stream(main)
                if s == 0:
                    torch.matmul(aj, wt, out=dst)
                else:
                    cu.stream_batch_mem_op(h_main, cu.mem_op_batch([(True, self.ws.flag_addr(rank, self.slot(P, 0, s, j)), 1), (False, self.ws.flag_addr(rank, self.slot(P, 0, s, j)), 0)]))
                    recv = self.ws.data(rank, P, (hi - lo, self.N), torch.bfloat16, offset=((s - 1) * self.mc + lo) * self.N * E) if ((s - 1) * self.mc + lo) * self.N * E % 256 == 0 else None
                    if recv is None:
                        recv = torch.empty(0)
                        base = self.ws._views[rank]
                        off = self.ws._flags_bytes + P * self.ws.capacity + ((s - 1) * self.mc + lo) * self.N * E
                        recv = base[off: off + (hi - lo) * self.N * E].view(torch.bfloat16).view(hi - lo, self.N)
                    torch.addmm(recv, aj, wt, out=dst)
                ev = self.events[s * self.S + j]
                ev.record(main)
                self.side.wait_event(ev)
                nb = (hi - lo) * self.N * E
                if s < W - 1:
                    cu.memcpy_async(h_side, self.recv_addr(self.prev, P, s + 1, lo), dst.data_ptr(), nb)
                    cu.stream_batch_mem_op(h_side, cu.mem_op_batch([(False, self.ws.flag_addr(self.prev, self.slot(P, 0, s + 1, j)), 1)]))
                elif self.op == "ar":
                    for q in range(1, W):
                        p = (rank + q) % W
                        cu.memcpy_async(h_side, self.gather_addr(p, P, own_rows0 + lo), dst.data_ptr(), nb)
                        cu.stream_batch_mem_op(h_side, cu.mem_op_batch([(False, self.ws.flag_addr(p, self.slot(P, 1, rank, j)), 1)]))
        if main is not caller:
            torch.cuda.set_stream(caller)
            caller.wait_stream(main)
            main, h_main = caller, caller.cuda_stream
        main.wait_stream(self.side)
        if self.op == "ar":
            for q in range(1, W):
                p = (rank + q) % W
                cu.stream_batch_mem_op(h_main, cu.mem_op_batch([(w_, self.ws.flag_addr(rank, self.slot(P, 1, p, j)), 0 if not w_ else 1) for j in range(self.S) for w_ in (True, False)]))
                base = self.ws._views[rank]
                off = self.ws._flags_bytes + P * self.ws.capacity + self.recv_bytes + p * self.mc * self.N * E
                n_rows = min(self.mc, self.M - p * self.mc)
                out[p * self.mc: p * self.mc + n_rows].copy_(base[off: off + n_rows * self.N * E].view(torch.bfloat16).view(n_rows, self.N))
        return out


class Graphed:
    """Replays of a callable captured on one input set, one graph per parity."""
    def __init__(self, fn, x):
        self.graphs, self.i, self.x, self.fn = [], 0, x, fn
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn(x)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        for _ in range(2):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn(x)
            self.graphs.append(g)
        torch.cuda.synchronize()

    def __call__(self, _x):
        self.graphs[self.i % 2].replay()
        self.i += 1
        return self.x["o"]


def inputs_for(op, M, K, N):
    g = torch.Generator(device="cuda").manual_seed(11 + rank)
    rows_out = M // W if op == "rs" else M
    return [dict(a=torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16),
                 w=(torch.randn(N, K, device="cuda", generator=g) / K**0.5).to(torch.bfloat16),
                 o=torch.empty(rows_out, N, device="cuda", dtype=torch.bfloat16),
                 full=torch.empty(M, N, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]


def gemm(x):
    return torch.matmul(x["a"], x["w"].t(), out=x["full"])


def seq_rs(x):
    torch.matmul(x["a"], x["w"].t(), out=x["full"])
    dist.reduce_scatter_tensor(x["o"], x["full"], group=tp.group)
    return x["o"]


def seq_ar(x):
    torch.matmul(x["a"], x["w"].t(), out=x["o"])
    dist.all_reduce(x["o"], group=tp.group)
    return x["o"]


def fused_rs(x):
    return fluxlite.gemm_rs(x["a"], x["w"], group=tp.group, impl="fused", out=x["o"])


def fused_ar(x):
    return fluxlite.gemm_ar(x["a"], x["w"], group=tp.group, impl="fused", out=x["o"])


res = {}
rounds = int(os.environ.get("ROUNDS", 5))
S_LIST = [int(s) for s in os.environ.get("SUBS", "2 3").split()]
for spec in sys.argv[1].split():
    op, dims = spec.split(":")
    M, K, N = (int(v) for v in dims.split(","))
    inputs = inputs_for(op, M, K, N)
    x = inputs[0]
    ref = x["a"].double() @ x["w"].double().t()
    dist.all_reduce(ref, group=tp.group)
    if op == "rs":
        ref = ref[rank * (M // W): (rank + 1) * (M // W)]
    rings = {f"ring{S}": Ring(op, M, K, N, S) for S in S_LIST}
    rings.update({f"ring{S}s2": Ring(op, M, K, N, S, streams=2) for S in S_LIST})
    errs = {}
    for name, fn in rings.items():
        for it in range(3):  # both parities
            x["o"].fill_(float("nan"))
            y = fn(x)
        torch.cuda.synchronize()
        errs[name] = ((y.double() - ref).abs().max() / ref.abs().max()).item()
    graphed = {}
    for name, fn in list(rings.items()):
        graphed[name + "g"] = Graphed(Ring(op, M, K, N, fn.S, streams=fn.streams), x)
        for it in range(2):
            x["o"].fill_(float("nan"))
            y = graphed[name + "g"](x)
        torch.cuda.synchronize()
        errs[name + "g"] = ((y.double() - ref).abs().max() / ref.abs().max()).item()
    split = {f"split{S}": Ring(op, M, K, N, S, split_only=True) for S in S_LIST}
    rings.update(split)
    graphed.update({k + "g": Graphed(v, x) for k, v in split.items()})
    limit, _, transfer = limit_case(tp, "gemm_rs" if op == "rs" else "gemm_ar", M, K, N, torch.bfloat16, dev, gemm, 60.0)
    fns = {"cublas": gemm, "limit": limit, "seq": seq_rs if op == "rs" else seq_ar,
           "fused": fused_rs if op == "rs" else fused_ar, **{k: v for k, v in rings.items() if not k.startswith("split")}, **graphed}
    times, _ = time_rounds(Timer(tp, dev), fns, inputs, rounds=rounds, warmup=3)
    transfer.close()
    if rank == 0:
        t = {n: times[n]["throughput"] for n in fns}
        l = {n: times[n]["latency"] for n in fns}
        h = {n: times[n]["host"] for n in fns}
        print(f"{op} {M}x{K}->{N}: cublas {t['cublas']:.3f} ms | tp/limit " + " ".join(f"{n} {t[n]/t['limit']:.3f}" for n in fns)
              + " | lat/seq " + " ".join(f"{n} {l[n]/l['seq']:.3f}" for n in fns if n not in ('cublas', 'limit'))
              + " | host us " + " ".join(f"{n} {h[n]*1e3:.0f}" for n in fns)
              + " | err " + " ".join(f"{k} {v:.1e}" for k, v in errs.items()), flush=True)
    res[spec] = dict(times=times, errs=errs)
    torch.cuda.synchronize()
    del graphed
    del inputs, rings
    fluxlite.release_workspaces()
if rank == 0 and os.environ.get("OUT"):
    json.dump(res, open(os.path.join(os.environ["OUT"], f"ring_{os.getpid()}.json"), "w"), indent=1)
dist.destroy_process_group()
