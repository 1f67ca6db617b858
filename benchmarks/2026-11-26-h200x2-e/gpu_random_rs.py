"""tests/test_gpu_random.py's cases for the given seeds, each failing case printed (rank 0) instead of one
assertion at the end: `python3 gpu_random_rs.py SEED ...` from the repository root."""
import os, random, sys
sys.path.insert(0, ".")
import torch
from tests.gpu_utils import run_gpu_ranks
from tests import test_gpu_random as T


def body(rank, W, seed):
    rng = random.Random(seed)
    gen = torch.Generator(device=T.dev()).manual_seed(seed * 100 + rank)
    for i in range(T.CASES):
        case = T.draw_case(rng)
        f = T._run_case(case, W, gen)
        if f and rank == 0:
            print("FAIL", i, f[0][:400], f"({len(f)} calls)", flush=True)
    print("done", rank, seed, flush=True)


if __name__ == "__main__":
    for seed in map(int, sys.argv[1:]):
        try:
            run_gpu_ranks(body, 2, seed, limit_s=200)
        except Exception as e:
            print("run failed", repr(e)[:300])
