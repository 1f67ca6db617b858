"""The two timings smpush.py and cons.py share (TP ranks under torchrun, NCCL initialised)."""
import statistics as st, time, torch, torch.distributed as dist


def thr(fn, n=20):
    """(device us per call, host us per call) of ``n`` calls back to back after 3 untimed ones."""
    for _ in range(3): fn()
    torch.cuda.synchronize(); dist.barrier()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    t0 = time.perf_counter(); s.record()
    for _ in range(n): fn()
    h = (time.perf_counter() - t0) / n
    e.record(); e.synchronize(); return s.elapsed_time(e) / n * 1e3, h * 1e6


def lat(fn, n=10):
    """Median wall us of one call between a barrier and a synchronisation."""
    ts = []
    for _ in range(n):
        torch.cuda.synchronize(); dist.barrier(); torch.cuda.synchronize()
        t0 = time.perf_counter(); fn(); torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
    return st.median(ts) * 1e6
