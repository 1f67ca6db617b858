"""The profiler with GEMM-RS's matmul-consumer splits per chunk set by SPLITS (A/B of MATMUL_SPLITS)."""
import os, sys
sys.path.insert(0, os.getcwd())
import fluxlite.ops.gemm_rs as g
g.MATMUL_SPLITS = int(os.environ["SPLITS"])
from fluxlite.profile.cli import main
sys.exit(main(sys.argv[1:]))
