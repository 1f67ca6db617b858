import sys, torch
from fluxlite._cuda_driver import buffer_ids
exp = sys.argv[1] == "exp"
if exp:
    torch.cuda.memory._set_allocator_settings("expandable_segments:True")
torch.cuda.set_device(0)
res = []
keep = torch.empty(1 << 20, device="cuda")
for n in (1 << 20, 4 << 20, 64 << 20):
    ptrs = []
    for i in range(5):
        t = torch.empty(n, dtype=torch.uint8, device="cuda")
        ptrs.append((t.data_ptr(), buffer_ids((t.data_ptr(),))[0]))
        del t
        torch.cuda.synchronize(); torch.cuda.empty_cache()
    same_va = sum(p[0] == ptrs[0][0] for p in ptrs[1:])
    same_id = sum(p == ptrs[0] for p in ptrs[1:])
    print(f"expandable={exp} bytes={n}: same address {same_va}/4, same address+id {same_id}/4; ids {[p[1] for p in ptrs]}")
