"""Count the internal-replay captures (and their host time) while fluxlite-profile runs; under torchrun."""
import sys, time, atexit, os
sys.path.insert(0, os.getcwd())
import torch.distributed as dist
from fluxlite.fused import state as st
from fluxlite.fused import call as callmod
stats = dict(captures=0, capture_s=0.0, launches=0)
orig = st.FusedState.capture
def capture(self, enqueue):
    t = time.perf_counter()
    try:
        return orig(self, enqueue)
    finally:
        stats["captures"] += 1; stats["capture_s"] += time.perf_counter() - t
st.FusedState.capture = capture
orig_launch = callmod.cu.graph_launch
def launch(*a):
    stats["launches"] += 1
    return orig_launch(*a)
callmod.cu.graph_launch = launch
atexit.register(lambda: print(f"rank {os.environ.get('RANK')}: captures {stats['captures']} ({stats['capture_s']*1e3:.1f} ms, "
                              f"{stats['capture_s']/max(stats['captures'],1)*1e6:.0f} us each), graph launches {stats['launches']}", flush=True))
from fluxlite.profile.cli import main
sys.exit(main())
