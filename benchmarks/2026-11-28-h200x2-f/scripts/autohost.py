"""Host time and Python calls of an auto call whose choice is sequential, against the named call (2 GPUs)."""
import os, statistics, sys, time, torch, torch.distributed as dist, fluxlite
from fluxlite import dispatch

def count_calls(fn):
    n = [0]; names = {}
    def prof(frame, event, arg):
        if event in ("call", "c_call"):
            n[0] += 1
            k = (frame.f_code.co_filename.split("/")[-1], frame.f_code.co_name) if event == "call" else ("C", getattr(arg, "__qualname__", str(arg)))
            names[k] = names.get(k, 0) + 1
    sys.setprofile(prof); fn(); sys.setprofile(None)
    return n[0], names

def main():
    rank = int(os.environ["RANK"]); torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    M, K, N = [int(v) for v in sys.argv[1].split(",")]
    op = sys.argv[2] if len(sys.argv) > 2 else "ag"
    g = torch.Generator(device="cuda").manual_seed(rank)
    m = M // 2 if op == "ag" else M
    inputs = [torch.randn(m, K, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3)]
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g)
    f = {"ag": fluxlite.ag_gemm, "rs": fluxlite.gemm_rs, "ar": fluxlite.gemm_ar}[op]
    with dispatch.assume_mode("latency"):
        f(inputs[0], w, impl="auto")
    torch.cuda.synchronize()
    key = dispatch.Key.of({"ag": "ag_gemm", "rs": "gemm_rs", "ar": "gemm_ar"}[op], fluxlite.resolve_group(), inputs[0], w, M)
    if rank == 0: print("choices", dispatch.describe_modes(key))
    modes = ["throughput", "both", "latency", "latency", "latency"]
    for rep in range(2):
        for impl in ("sequential", "auto"):
            ts, counts = [], []
            for i in range(200):
                mode = modes[i % 5]; x = inputs[i % 3]
                with dispatch.assume_mode(mode):
                    torch.cuda._sleep(200000)
                    t0 = time.perf_counter(); f(x, w, impl=impl); ts.append((time.perf_counter() - t0) * 1e6)
                torch.cuda.synchronize()
            with dispatch.assume_mode("latency"):
                c, names = count_calls(lambda: f(inputs[1], w, impl=impl))
            torch.cuda.synchronize()
            if rank == 0:
                print(rep, impl, "host us median", round(statistics.median(ts), 1), "p90", round(sorted(ts)[180], 1), "py calls", c)
                if rep == 1 and impl == "auto":
                    print(sorted(names.items(), key=lambda kv: -kv[1])[:40])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
