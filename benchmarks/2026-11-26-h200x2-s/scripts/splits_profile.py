"""The profiler with the matmul consumer's splits per chunk set by SPLITS (A/B of MATMUL_SPLITS); the setting is made
at import, so the profiler's spawned ranks (which import this module again) make it too."""
import os, sys
sys.path.insert(0, os.getcwd())
import fluxlite.ops.gemm_rs as g
g.MATMUL_SPLITS = int(os.environ["SPLITS"])
if __name__ == "__main__":
    from fluxlite.profile.cli import main
    sys.exit(main(sys.argv[1:]))
