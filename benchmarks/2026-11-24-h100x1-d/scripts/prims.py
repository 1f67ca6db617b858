"""Host µs of the primitives a repeated fused call makes (one process, one GPU, GPU kept busy)."""
import os, sys, time, statistics, threading
import torch, torch.distributed as dist
sys.path.insert(0, os.getcwd())
from fluxlite import ops, flags, workspace, _cuda_driver as cu
torch.cuda.set_device(0)
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29511", rank=0, world_size=1)
a = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16); w = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16)
dev = a.device; s = torch.cuda.current_stream().cuda_stream
key = ("ag_gemm", dist.group.WORLD, 120.0, type(None), 0, *((type(o), o) for o in ("fused", False, None, None)),
       *map(ops._tensor_key, (a, w, None, None, None)))
d = {key: 1}
loc = threading.local(); loc.x = 0
cu.ensure_context(0)
P = {
 "dist.group.WORLD": lambda: dist.group.WORLD,
 "resolve_timeout(None)": lambda: flags.resolve_timeout(None),
 "os.environ.get": lambda: os.environ.get("FLUXLITE_TIMEOUT_S"),
 "torch.cuda.current_device()": lambda: torch.cuda.current_device(),
 "torch._C._cuda_getDevice()": lambda: torch._C._cuda_getDevice(),
 "a.get_device()": lambda: a.get_device(),
 "_tensor_key(a)": lambda: ops._tensor_key(a),
 "a.shape": lambda: a.shape, "a.stride()": lambda: a.stride(), "a.dtype": lambda: a.dtype,
 "a.data_ptr()": lambda: a.data_ptr(), "a.device": lambda: a.device,
 "build key": lambda: ("ag_gemm", dist.group.WORLD, flags.resolve_timeout(None), type(None), torch.cuda.current_device(),
       *((type(o), o) for o in ("fused", False, None, None)), *map(ops._tensor_key, (a, w, None, None, None))),
 "dict.get(key)": lambda: d.get(key),
 "hash(key)": lambda: hash(key),
 "ops._repeat": lambda: ops._repeat("ag_gemm", None, None, ("fused", False, None, None), (a, w, None, None, None)),
 "no_grad enter+exit": lambda: (lambda g: (g.__enter__(), g.__exit__(None, None, None)))(torch.no_grad()),
 "a.detach()": lambda: a.detach(), "a.contiguous()": lambda: a.contiguous(),
 "operands_as_used": lambda: ops.operands_as_used(a, w, None),
 "a.new_empty([2048,2048])": lambda: a.new_empty((2048, 2048)),
 "torch.empty(2048,2048)": lambda: torch.empty((2048, 2048), dtype=a.dtype, device=dev),
 "is_current_stream_capturing()": lambda: torch.cuda.is_current_stream_capturing(),
 "_C._cuda_isCurrentStreamCapturing": lambda: torch._C._cuda_isCurrentStreamCapturing(),
 "workspace.capturing(dev)": lambda: workspace.capturing(dev),
 "time.monotonic()": time.monotonic,
 "cu.ensure_context(0)": lambda: cu.ensure_context(0),
 "threading.local attr": lambda: getattr(loc, "x", None),
 "_cuda_getCurrentRawStream(0)": lambda: torch._C._cuda_getCurrentRawStream(0),
 "torch.matmul(a, w.t())": lambda: torch.matmul(a, w.t()),
}
torch.cuda._sleep(200_000_000)
for name, f in P.items():
    for _ in range(50): f()
    ts = []
    for _ in range(400):
        t = time.perf_counter_ns(); f(); ts.append(time.perf_counter_ns() - t)
    print(f"{name:36s} {statistics.median(ts)/1e3:6.2f} us")
torch.cuda.synchronize()
