"""The deferred-norm benchmark: RMSNorm -> all-gather GEMM -> SwiGLU, three ways, forward, one run.

    torch_unfused   rms_norm(x); all_gather; matmul; silu(gate) * up          (four ops)
    norm_then_fused rms_norm(x); fluxlite.ag_gemm(impl="fused"); silu * up    (the norm and SwiGLU as separate ops)
    deferred_fused  row stats of x; fluxlite.ag_gemm(x, W', row_scale=1/rms, activation="swiglu", impl="fused")
                    (gamma folded into W' once, as LayerNormColumnParallelLinear caches it)

``x: [tokens/W, hidden]`` per rank, ``W: [2*ffn_local, hidden]`` (gate rows, then up rows), output
``[tokens, ffn_local]``. Timed with :mod:`fluxlite.profile.timing` (throughput, latency, host), the
outputs checked against a float32 reference first. Default: Llama-70B's fc1 at TP=2, 8192 tokens
(hidden 8192, ffn_local 14336), bf16 on GPUs; a tiny fp32 shape on CPU ranks.

    torchrun --standalone --nproc-per-node 2 scripts/bench_norm_linear.py --out norm_linear.json
"""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

from fluxlite._cli import ArgumentParser
import fluxlite
from fluxlite._sequential import all_gather_rows
from fluxlite.parallel.norm_linear import NormOptions, fold, row_stats
from fluxlite.timing import Timer, run_each_once, time_rounds


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=None, help="all ranks' rows (default 8192 GPU, 64 CPU)")
    parser.add_argument("--hidden", type=int, default=None, help="default 8192 GPU, 32 CPU")
    parser.add_argument("--ffn-local", type=int, default=None, help="SwiGLU output columns per rank (14336 GPU, 24 CPU)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", default=None, help="write the JSON here")
    args = parser.parse_args()

    tp = fluxlite.init()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    W, rank = tp.world_size, tp.rank
    tokens = args.tokens or (8192 if cuda else 64)
    hidden = args.hidden or (8192 if cuda else 32)
    ffn = args.ffn_local or (14336 if cuda else 24)
    if tokens % W:
        parser.error(f"--tokens ({tokens}) must be divisible by the world size ({W})")
    m = tokens // W
    g = torch.Generator(device="cpu").manual_seed(1 + rank)
    inputs = [torch.randn(m, hidden, generator=g).to(device, dtype) for _ in range(2)]
    g = torch.Generator(device="cpu").manual_seed(0)  # the same weights on every rank
    weight = (torch.randn(2 * ffn, hidden, generator=g) / hidden**0.5).to(device, dtype)
    gamma = (1 + 0.1 * torch.randn(hidden, generator=g)).to(device, dtype)
    norm = NormOptions("RMSNorm", 1e-5, False, True)
    w_fold, _ = fold(weight, None, gamma, None, norm)

    def swiglu(z):
        gate, up = z.chunk(2, dim=-1)
        return F.silu(gate) * up

    def torch_unfused(x):
        return swiglu(all_gather_rows(F.rms_norm(x, (hidden,), gamma, 1e-5), tp) @ weight.t())

    def norm_then_fused(x):
        return swiglu(fluxlite.ag_gemm(F.rms_norm(x, (hidden,), gamma, 1e-5), weight, impl="fused"))

    def deferred_fused(x):
        _, s = row_stats(x, norm)
        return fluxlite.ag_gemm(x, w_fold, impl="fused", row_scale=s, activation="swiglu")

    fns = dict(torch_unfused=torch_unfused, norm_then_fused=norm_then_fused, deferred_fused=deferred_fused)
    timer = Timer(tp, device)
    outputs, failed = run_each_once(timer, fns, inputs[0])
    full = all_gather_rows(inputs[0], tp).float()
    ref = swiglu(F.rms_norm(full, (hidden,), gamma.float(), 1e-5) @ weight.float().t())
    errors = {k: ((v.float() - ref).norm() / ref.norm()).item() for k, v in outputs.items()}
    times, batch = time_rounds(timer, fns, inputs, rounds=args.rounds)
    result = dict(device=torch.cuda.get_device_name() if cuda else "cpu", world_size=W, dtype=str(dtype),
                  tokens=tokens, hidden=hidden, ffn_local=ffn, torch=torch.__version__, times_ms=times, batch=batch,
                  rel_error_vs_fp32=errors, failed=failed)
    if rank == 0:
        print(f"{'impl':<18}{'throughput':>12}{'latency':>10}{'host':>8}  rel.err")
        for name, t in times.items():
            print(f"{name:<18}{t['throughput']:>12.3f}{t['latency']:>10.3f}{t['host']:>8.3f}  {errors[name]:.1e}")
        base = times.get("deferred_fused")
        if base:
            for name in ("torch_unfused", "norm_then_fused"):
                if name in times:
                    print(f"deferred_fused saves {times[name]['throughput'] - base['throughput']:.3f} ms (throughput) "
                          f"and {times[name]['latency'] - base['latency']:.3f} ms (latency) per layer vs {name}")
        if args.out:
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)
    fluxlite.release_workspaces()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
