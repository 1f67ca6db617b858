"""bench_gpt.py with the Column backward's input grad (no sequence parallelism) through gemm_ar
(the all-reduce overlapped with the dgrad GEMM itself) even where a weight grad follows, in place
of the matmul whose NCCL all-reduce runs beside the weight grad."""
import os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "scripts"))
sys.path.append(os.getcwd())
import torch
import fluxlite.parallel.functions as F

orig = F._start_column_dgrad


def patched(g, weight, opt, wgrad):
    if not opt.sp and opt.allreduce_dgrad and opt.tp.world_size > 1:
        return torch.ops.fluxlite.gemm_ar(g, weight.t(), None, opt.tp.name, opt.impl, None, None)
    return orig(g, weight, opt, wgrad)


F._start_column_dgrad = patched
import bench_gpt  # noqa: E402
sys.exit(bench_gpt.main())
