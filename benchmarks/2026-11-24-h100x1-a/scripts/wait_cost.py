"""Cost of one kernel wait on a flag that is already set: the lazy timer (HEAD), the timer read before the
first look (fa77c20), and no timer at all; persistent grid, every program waits N times."""
import sys, os, statistics
sys.path.insert(0, os.getcwd())
import torch, triton, triton.language as tl
from fluxlite.kernels.flags import wait_set, program_time, _record, INTERPRET_SPIN_NS

@triton.jit
def wait_eager(flag_ptr, call_ptr, error_ptr, timeout_ns, code, slot, peer, chunk):
    seen = tl.atomic_add(flag_ptr, 0, sem="acquire", scope="sys")
    err = tl.atomic_add(error_ptr, 0, sem="relaxed", scope="gpu")
    start = program_time()
    while (seen < 1) & (err == 0):
        elapsed = program_time() - start
        if elapsed > timeout_ns:
            _record(error_ptr, code, slot, call_ptr, seen, peer, chunk)
            err = tl.full((), code, tl.int32)
        else:
            seen = tl.atomic_add(flag_ptr, 0, sem="acquire", scope="sys")
            err = tl.atomic_add(error_ptr, 0, sem="relaxed", scope="gpu")
    tl.debug_barrier()
    return err

@triton.jit
def wait_none(flag_ptr, call_ptr, error_ptr, timeout_ns, code, slot, peer, chunk):
    seen = tl.atomic_add(flag_ptr, 0, sem="acquire", scope="sys")
    err = tl.atomic_add(error_ptr, 0, sem="relaxed", scope="gpu")
    while (seen < 1) & (err == 0):
        seen = tl.atomic_add(flag_ptr, 0, sem="acquire", scope="sys")
        err = tl.atomic_add(error_ptr, 0, sem="relaxed", scope="gpu")
    tl.debug_barrier()
    return err

@triton.jit
def k(flags, call, error, out, N: tl.constexpr, VARIANT: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.full((), 0, tl.int32)
    for i in range(N):
        f = flags + (i % 64)
        if VARIANT == 0:
            e = wait_set(f, call, error, 10_000_000_000, 1, i, 0, 0, False)
        elif VARIANT == 1:
            e = wait_eager(f, call, error, 10_000_000_000, 1, i, 0, 0)
        else:
            e = wait_none(f, call, error, 10_000_000_000, 1, i, 0, 0)
        acc += e
    tl.store(out + pid, acc)

flags = torch.ones(64, dtype=torch.int32, device="cuda"); call = torch.zeros(1, dtype=torch.int32, device="cuda")
error = torch.zeros(16, dtype=torch.int32, device="cuda"); sms = torch.cuda.get_device_properties(0).multi_processor_count
out = torch.empty(sms, dtype=torch.int32, device="cuda")
N = 256
names = {0: "lazy (HEAD)", 1: "timer before first look (fa77c20)", 2: "no timer"}
res = {}
for warps in (4, 8):
    for v in (0, 1, 2):
        f = lambda: k[(sms,)](flags, call, error, out, N=N, VARIANT=v, num_warps=warps)
        for _ in range(3): f()
        torch.cuda.synchronize()
        ts = []
        for _ in range(30):
            s, e = torch.cuda.Event(True), torch.cuda.Event(True)
            s.record(); f(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e) * 1e3)
        res[(warps, v)] = statistics.median(ts) / N * 1e3
        assert int(out.sum()) == 0 and int(error[0]) == 0
for (warps, v), ns in res.items():
    print(f"wait_cost num_warps={warps} {names[v]:34s} {ns:7.1f} ns per wait")
