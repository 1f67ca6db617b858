"""GEMM-RS failure details: `python3 diag_rs.py MODE` (seq: test_gpu_random seed-1 cases 0..8; pp: the two
pointer-partial cases, 20 calls). DIAG_NOGRAPH=1: no internal replays (every call eager)."""
import os, random, sys
sys.path.insert(0, os.getcwd())
import torch
from tests.gpu_utils import run_gpu_ranks, rs_reference
from tests import test_gpu_random as T
from fluxlite import epilogue as E


def detail(out, ref, bn=256):
    bad = ~torch.isfinite(out)
    nan = torch.isnan(out).sum().item(); inf = torch.isinf(out).sum().item()
    s = f"nonfinite {bad.sum().item()} (nan {nan}, inf {inf}) of {out.numel()}"
    if bad.any():
        idx = bad.nonzero()
        s += f" rows {idx[:,0].min().item()}..{idx[:,0].max().item()} cols {idx[:,1].min().item()}..{idx[:,1].max().item()}"
        tiles = {}
        for r, c in idx.tolist():
            tiles[(r // 128, c // bn)] = tiles.get((r // 128, c // bn), 0) + 1
        s += f" per tile(128x{bn}) {dict(sorted(tiles.items()))}"
    fin = torch.isfinite(out)
    d = (out.float() - ref.float()).abs()
    d[~fin] = 0
    big = d > 0.05 * ref.float().abs().max()
    s += f"; finite but wrong: {big.sum().item()}"
    if big.any():
        idx = big.nonzero()
        s += f" rows {idx[:,0].min().item()}..{idx[:,0].max().item()} cols {idx[:,1].min().item()}..{idx[:,1].max().item()}"
    return s


def run_case(case, W, gen, calls, rank, tag):
    import fluxlite
    op, m, K, N, dtype = case["op"], case["m"], case["K"], case["N"], case["dtype"]
    gated = case["activation"] == "swiglu"
    shared = torch.Generator(device=T.dev()).manual_seed(case["seed"])
    w = T._weight(case, 2 * N if gated else N, shared)
    bias = torch.randn(w.shape[0], generator=shared, device=T.dev()).to(dtype) if case["bias"] else None
    rows = W * m if op == "rs" else m
    a = torch.empty(rows, K, dtype=dtype, device=T.dev())
    row_scale = torch.empty(m, device=T.dev()) if case["row_scale"] else None
    out = torch.empty(m if op == "rs" else W * m, N, dtype=dtype, device=T.dev())
    ep = E.Epilogue(case["activation"], row_scale is not None, 1.0 if case["scale"] is None else case["scale"])
    nfail = 0
    for call in range(calls):
        a.copy_(torch.randn(rows, K, generator=gen, device=T.dev()))
        if row_scale is not None:
            row_scale.copy_(torch.rand(m, generator=gen, device=T.dev()) + 0.5)
        out.fill_(float("nan"))
        if op == "rs":
            fluxlite.gemm_rs(a, w, bias, impl="fused", out=out, scale=case["scale"])
            ref = E.apply(rs_reference(a, w, None), ep, bias, None, torch.float32)
        else:
            fluxlite.ag_gemm(a, w, bias, impl="fused", out=out, return_gathered=op == "ag_pull",
                             activation=case["activation"], row_scale=row_scale, scale=case["scale"])
            ref, _ = T.ag_epilogue_reference(a, w, bias, row_scale, ep)
        fluxlite.synchronize()
        err = T.rel_err(out, ref)
        if not err < (2e-2 if gated else 1e-2):
            nfail += 1
            print(f"FAIL rank {rank} {tag} m={m} K={K} N={N} call {call}: err {err:.3g}; {detail(out, ref)}", flush=True)
    return nfail


def body(rank, W, mode):
    if os.environ.get("DIAG_NOGRAPH"):
        import fluxlite.fused.call as C
        C.MAX_GRAPHS = 0
    fails = 0
    if mode == "seq":
        rng = random.Random(1)
        gen = torch.Generator(device=T.dev()).manual_seed(100 + rank)
        for i in range(9):
            case = T.draw_case(rng)
            fails += run_case(case, W, gen, 3, rank, f"case{i}")
    else:
        gen = torch.Generator(device=T.dev()).manual_seed(rank)
        for j, case in enumerate(T.POINTER_PARTIAL_CASES):
            fails += run_case(case, W, gen, 20, rank, f"pp{j}")
    print(f"done rank {rank} {mode} fails {fails}", flush=True)


if __name__ == "__main__":
    for mode in sys.argv[1:]:
        try:
            run_gpu_ranks(body, 2, mode, limit_s=150)
        except Exception as e:
            print("run failed", repr(e)[:300])
