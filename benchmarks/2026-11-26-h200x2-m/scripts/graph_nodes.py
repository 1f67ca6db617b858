"""Host time of a graph replay by node kind: graphs of 10 nodes of one kind each (cuGraphLaunch via
fluxlite's driver binding, and torch's replay()), launched while the device sleeps.
    torchrun --standalone --nproc-per-node 2 graph_nodes.py"""
import os, statistics, sys, time
sys.path.insert(0, os.getcwd())
import torch
import torch.distributed as dist
import fluxlite
from fluxlite import _cuda_driver as cu
from fluxlite.workspace import get_workspace

tp = fluxlite.init()
W, rank = tp.world_size, tp.rank
dev = torch.device("cuda", torch.cuda.current_device())
ws = get_workspace(None, dev)
ws.reserve(4 << 20)
peer = (rank + 1) % W
stream = torch.cuda.current_stream().cuda_stream
side = torch.cuda.Stream()
local = torch.zeros(1 << 20, dtype=torch.uint8, device=dev)
local2 = torch.zeros(1 << 20, dtype=torch.uint8, device=dev)
x = torch.zeros(1024, device=dev)
ev = [torch.cuda.Event() for _ in range(10)]
ev2 = [torch.cuda.Event() for _ in range(10)]
NB = 64 << 10
peer_data, my_data = ws.data_addr(peer, 0), ws.data_addr(rank, 0)
flag_local, flag_peer = ws.flag_addr(rank, 0), ws.flag_addr(peer, 1)
w_local = cu.mem_op_batch([(False, flag_local, 0)])
w_peer = cu.mem_op_batch([(False, flag_peer, 0)])


def kinds():
    return {
        "kernel (add_)": lambda i: x.add_(1),
        "memcpy local->local": lambda i: cu.memcpy_async(stream, local2.data_ptr() + i * NB, local.data_ptr() + i * NB, NB),
        "memcpy local->peer": lambda i: cu.memcpy_async(stream, peer_data + i * NB, local.data_ptr() + i * NB, NB),
        "memcpy sym local->local": lambda i: cu.memcpy_async(stream, my_data + i * NB, local.data_ptr() + i * NB, NB),
        "memop write local": lambda i: cu.stream_batch_mem_op(stream, w_local),
        "memop write peer": lambda i: cu.stream_batch_mem_op(stream, w_peer),
        "fork/join side stream": lambda i: fork_join(i),
    }


def fork_join(i):
    ev[i].record()
    side.wait_event(ev[i])
    with torch.cuda.stream(side):
        x.add_(1)
    ev2[i].record(side)
    torch.cuda.current_stream().wait_event(ev2[i])


def host_us(fn, reps=40):
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        torch.cuda._sleep(20_000_000)
        t = time.perf_counter(); fn(); out.append((time.perf_counter() - t) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out), min(out)


res = {}
for name, make in kinds().items():
    for n in (1, 10):
        g = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.cuda.graph(g):

            stream = torch.cuda.current_stream().cuda_stream
            for i in range(n):
                make(i)
        stream = torch.cuda.current_stream().cuda_stream
        g.replay(); torch.cuda.synchronize()
        res[(name, n, "replay()")] = host_us(g.replay)
        exec_ = g.raw_cuda_graph_exec() if hasattr(g, "raw_cuda_graph_exec") else None
        if exec_ is not None:
            res[(name, n, "cuGraphLaunch")] = host_us(lambda: cu.graph_launch(exec_, stream))
        del g
dist.barrier()
if rank == 0:
    for k, v in res.items():
        print(f"{k[0]:26s} x{k[1]:<3d} {k[2]:14s} median {v[0]:7.1f} us  min {v[1]:7.1f}", flush=True)
fluxlite.release_workspaces()
dist.destroy_process_group()
