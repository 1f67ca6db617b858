"""cuBLAS alone on one GPU: the MLP block's GEMMs whole against the parts fluxlite's fused paths run
(bf16, Llama-70B widths, 8192 tokens, TP=2). Each timed as 30 calls back to back, median of 7."""
import statistics, torch
torch.manual_seed(0); dev = "cuda"; bf = torch.bfloat16
T, H, F2 = 8192, 8192, 28672  # tokens, hidden, fc1 out per rank (2*ffn/2); fc2 in per rank 14336
def timed(f, n=30, reps=7):
    for _ in range(5): f()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(); s.record()
        for _ in range(n): f()
        e.record(); e.synchronize(); ts.append(s.elapsed_time(e) / n)
    return statistics.median(ts)
def row(name, whole, parts):
    print(f"{name:58s} whole {whole:6.3f} ms  parts {parts:6.3f} ms  ratio {parts / whole:5.3f}", flush=True)
for tag, N in (("fc1", F2), ("fc2", H)):
    K = H if tag == "fc1" else 14336
    x = torch.randn(T, K, device=dev, dtype=bf); w = torch.randn(N, K, device=dev, dtype=bf); out = torch.empty(T, N, device=dev, dtype=bf)
    h = T // 2
    whole = timed(lambda: torch.mm(x, w.t(), out=out))
    row(f"{tag} fwd AG: M halves", whole, timed(lambda: (torch.mm(x[:h], w.t(), out=out[:h]), torch.mm(x[h:], w.t(), out=out[h:]))))
    q = N // 4
    def colfirst():
        torch.mm(x[:h], w[:q].t(), out=out[:h, :q]); torch.mm(x, w[q:].t(), out=out[:, q:]); torch.mm(x[h:], w[:q].t(), out=out[h:, :q])
    row(f"{tag} fwd AG: own rows x N/4, all rows x 3N/4, peer x N/4", whole, timed(colfirst))
    # weight grad dW[N, K] = g[T, N].T @ x[T, K]: K-split over tokens
    g = torch.randn(T, N, device=dev, dtype=bf); dw = torch.empty(N, K, device=dev, dtype=bf)
    whole = timed(lambda: torch.mm(g.t(), x, out=dw))
    row(f"{tag} wgrad: token halves (mm then addmm_)", whole, timed(lambda: (torch.mm(g[:h].t(), x[:h], out=dw), dw.addmm_(g[h:].t(), x[h:]))))
    mg = torch.zeros(N, K, device=dev)
    w1 = timed(lambda: torch.addmm(mg, g.t(), x, out_dtype=torch.float32, out=mg))
    row(f"{tag} wgrad main_grad addmm: token halves", w1, timed(lambda: (torch.addmm(mg, g[:h].t(), x[:h], out_dtype=torch.float32, out=mg), torch.addmm(mg, g[h:].t(), x[h:], out_dtype=torch.float32, out=mg))))
    # dgrad (GEMM-RS of the Column; Row's AG dx): dx[T, K] = g[T, N] @ w[N, K], M chunks
    dx = torch.empty(T, K, device=dev, dtype=bf)
    whole = timed(lambda: torch.mm(g, w, out=dx))
    for c in (2, 4):
        m = T // c
        row(f"{tag} dgrad: {c} M-chunks", whole, timed(lambda: [torch.mm(g[i*m:(i+1)*m], w, out=dx[i*m:(i+1)*m]) for i in range(c)]))
    del x, w, out, g, dw, mg, dx
