"""Why auto's latency-mode calls cost more than forced fused ones in the profiler: count, per plan, the
eager calls that replayed, ran without a graph, or captured; and the full checks per impl.
    torchrun --standalone --nproc-per-node 2 diag_auto.py --shape rs:1024,4096,8192 ... (profile args)"""
import collections, os, sys, time
sys.path.insert(0, os.getcwd())


from fluxlite.fused import call as fcall
from fluxlite.fused import state as fstate
from fluxlite.ops.op import Op
from fluxlite import dispatch
from fluxlite.profile import cli

stats = collections.Counter()
host = collections.defaultdict(list)
orig_replay, orig_capture, orig_call = fcall.Call._replay, fstate.FusedState.capture, Op._call
current = {"plan": None}

def replay(self, key, copied, program, consume):
    graphs = self._bindings().graphs
    g = graphs.get(key) if key is not None else None
    kind = "nokey" if key is None else "first" if g is None else "nograph" if g is fcall._NO_GRAPH else "captured" if g is fcall._SEEN_ONCE else "replay"
    r = orig_replay(self, key, copied, program, consume)
    if kind == "replay" and g.buffers != fcall.cu.buffer_ids(copied):
        kind = "recapture"
    label = f"{self.op}:{self.plan.consumer}:{dispatch.config_label(self.plan.config) if self.plan.config else '-'}"
    stats[(label, dispatch._declared_mode() or "-", kind)] += 1
    return r

from fluxlite import timing
ctx = {"mode": "-", "impl": "-"}
def marked(method, name):
    def run(self, *a, **k):
        ctx["mode"] = name
        try:
            return method(self, *a, **k)
        finally:
            ctx["mode"] = "-"
    return run
timing.Timer.host = marked(timing.Timer.host, "host")
timing.Timer.latency = marked(timing.Timer.latency, "latency")
timing.Timer.throughput = marked(timing.Timer.throughput, "throughput")
orig_fused = {}
def timed_fused(op):
    f = op.fused
    def run(*a, **k):
        t = time.perf_counter()
        r = f(*a, **k)
        host[(op.name, ctx["impl"], ctx["mode"], "fused()")].append(time.perf_counter() - t)
        return r
    op.fused = run
from fluxlite.ops.ag_gemm import AG
from fluxlite.ops.gemm_rs import RS
orig_rep = Op._repeat
def rep(self, *a, **k):
    t = time.perf_counter()
    r = orig_rep(self, *a, **k)
    host[(self.name, ctx["impl"], ctx["mode"], "_repeat" + ("+hit" if r[1] is not None else ""))].append(time.perf_counter() - t)
    return r
Op._repeat = rep

def call(self, a, weight, bias, group, impl, timeout, out, options, forced=None):
    t = time.perf_counter()
    prev = ctx["impl"]
    ctx["impl"] = impl if forced is None else "cand"
    try:
        r = orig_call(self, a, weight, bias, group, impl, timeout, out, options, forced)
    finally:
        ctx["impl"] = prev
    host[(self.name, impl if forced is None else "cand", ctx["mode"], "call")].append(time.perf_counter() - t)
    return r

fcall.Call._replay = replay
Op._call = call
timed_fused(AG); timed_fused(RS)
rc = cli.main(sys.argv[1:])
if int(os.environ.get("RANK", 0)) == 0:
    for k in sorted(stats):
        print("replay", k, stats[k])
    for k in sorted(host):
        v = sorted(host[k]); print("host_us", k, len(v), "median %.1f p90 %.1f" % (1e6 * v[len(v) // 2], 1e6 * v[int(len(v) * .9)]))
sys.exit(rc)
