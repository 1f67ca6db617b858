"""lead_rows on the real heuristic: for AG shapes (profiler notation M,K,N: gathered rows, K, local
columns) at two ranks, the lead and the wave counts; prints the shapes where lead < m last, as
profiler arguments."""
import random, sys, math
import torch
from fluxlite import _cublaslt as L
from fluxlite.ops import ag_gemm as _f
import importlib
ag = importlib.import_module("fluxlite.ops.ag_gemm")
from fluxlite.profile.presets import model_shapes
shapes = []
for name in ["llama3-8b", "llama3-70b", "qwen2.5-72b", "gpt3-175b"]:
    for t in (4096, 8192, 16384):
        shapes += [(s.M, s.K, s.N) for s in model_shapes(name, 2, t) if s.op == "ag_gemm"]
rng = random.Random(4646)
shapes += [(8192, 5000, 3500), (6144, 3000, 4500), (12000, 8192, 2752), (6000, 7000, 5000)]
shapes += [(2 * rng.randint(1000, 8000), rng.randint(1000, 14000), rng.randint(1000, 15000)) for _ in range(24)]
cut = []
seen = set()
for M, K, N in shapes:
    if (M, K, N) in seen: continue
    seen.add((M, K, N))
    m = M // 2
    lead = ag.lead_rows(0, torch.bfloat16, m, K, N, False)
    h = L.tiling(0, torch.bfloat16, m, N, K, False)
    w = L.tiling(0, torch.bfloat16, M, N, K, False)
    extra = ""
    if lead < m:
        a, b = L.tiling(0, torch.bfloat16, lead, N, K, False), L.tiling(0, torch.bfloat16, 2 * m - lead, N, K, False)
        extra = f" -> {lead}+{2*m-lead}: {a} {b}"
        cut.append(f"ag:{M},{K},{N}")
    print(f"{M}x{K}->{N}: whole {w} halves {h}{extra}", file=sys.stderr)
print(" ".join(f"--shape {s}" for s in cut))
