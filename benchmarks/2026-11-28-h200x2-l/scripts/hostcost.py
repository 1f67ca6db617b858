"""Host time per call of the padding copies (no sync inside; the device idles ahead of the host)."""
import time, torch
from fluxlite import _sequential as S
a = torch.randn(64, 3001, device="cuda", dtype=torch.bfloat16)
wide = torch.randn(64, 2008, device="cuda", dtype=torch.bfloat16); out = torch.empty(64, 2001, device="cuda", dtype=torch.bfloat16)
def torch_pad(x):
    y = x.new_empty((x.shape[0], 3008)); y[:, :3001].copy_(x); y[:, 3001:].zero_(); return y
for name, fn in (("zero_padded (repitch)", lambda: S.zero_padded(a, 0, 7)), ("torch pad (copy + zero)", lambda: torch_pad(a)),
                 ("first_columns (repitch)", lambda: S.first_columns(wide, 2001, out)), ("torch crop (copy_)", lambda: out.copy_(wide[:, :2001]))):
    for _ in range(50): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(200): fn()
        ts.append((time.perf_counter() - t) / 200 * 1e6)
        torch.cuda.synchronize()
    print(f"{name}: {sorted(ts)[3]:.1f} us host per call (median of 7 x 200)", flush=True)
