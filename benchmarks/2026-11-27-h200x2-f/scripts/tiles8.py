"""The heuristic's first eight tiles at each shape's split rows, and the one any256 takes."""
import sys, torch
sys.path.insert(0, ".scratch/s25")
import any256; any256.install()
from fluxlite import _cublaslt as lt
sh = [tuple(l.split()) for l in open(".scratch/s25/cublaslt_tiles.txt")]
name = lambda t: "?" if t is None else f"{sh[t-1][1]}x{sh[t-1][2]}"
L = lt._library()
for spec in sys.argv[1:]:
    M, K, N = map(int, spec.split(":")[1].split(","))
    rows = M // 4
    a = torch.empty(rows, K, device="cuda", dtype=torch.bfloat16); w = torch.empty(N, K, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(rows, N, device="cuda", dtype=torch.bfloat16)
    lt.addmm_into(d, None, a, w, 1.0, True)
    key, plan = next((k, p) for (dev, k), p in lt._plans.items() if k[1:4] == (rows, N, K) and k[-1])
    h, desc, *lay, algo = plan
    tiles = [name(lt._tile(L, x)) for x in lt._candidates(L, h, desc, lay, key[-2])]
    print(f"{M}x{K}->{N} ({rows} rows): {' '.join(tiles)} -> {name(lt._tile(L, algo))}", flush=True)
