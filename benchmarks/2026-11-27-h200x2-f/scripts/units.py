"""The split unit GEMM-RS's matmul consumer takes at each shape (2 ranks), and the tile rows."""
import sys, torch
from fluxlite import _cublaslt as lt, schedule as sch
from fluxlite.ops import RS
dev = torch.device("cuda")
for spec in sys.argv[1:]:
    M, K, N = map(int, spec.split(":")[1].split(","))
    s = RS.schedule(2, 0, M, 64, 2)
    u = RS.split_unit(s, "torch", K, N, torch.bfloat16, dev)
    half = s.split_rows(0)[1]
    cut = RS.schedule(2, 0, M, 64, 2, u)
    print(f"{M}x{K}->{N}: half {half} rows, tile rows {lt.tile_rows(half, N, K, torch.bfloat16, dev, True)}, "
          f"unit {u}, splits {cut.split_rows(0)} {cut.split_rows(1)}")
