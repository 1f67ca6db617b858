"""Spawn NCCL process groups on the local GPUs for ``@pytest.mark.gpu`` tests.

``run_gpu_ranks(fn, world_size, *args)`` runs ``fn(rank, world_size, *args)`` in fresh processes,
one per GPU, joined by an NCCL group. Each worker is a fresh process: its first fluxlite call is a
true first call (no warm-up, default lazy module loading).
"""

from __future__ import annotations

import faulthandler
import os
import sys
import time
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .dist_utils import free_port

# Never use NVLink multicast on the shared test machines.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _entry(rank: int, world_size: int, port: int, fn, args, env) -> None:
    from fluxlite.group import die_with_parent

    die_with_parent()  # a pytest killed by a time limit leaves no rank spinning on a GPU
    os.environ.update(env)
    # A rank still running this long before the harness kills it prints every thread's stack:
    # a hang then says where it is.
    faulthandler.dump_traceback_later(float(env["FLUXLITE_DUMP_AFTER_S"]), exit=False)
    faulthandler.enable(all_threads=True)  # a crash (SIGSEGV) prints every thread's stack too
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    init = dict(init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    if world_size > torch.cuda.device_count():  # ranks share GPUs: NCCL refuses that, gloo serves CUDA tensors
        dist.init_process_group("cpu:gloo,cuda:gloo", **init)
    else:
        dist.init_process_group("nccl", device_id=device, **init)
    try:
        fn(rank, world_size, *args)
    except BaseException:
        # Tearing NCCL down while a peer sits in a collective can hang: report and leave at once;
        # mp.spawn sees the exit code and terminates the other ranks.
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    import fluxlite

    fluxlite.release_workspaces()
    dist.destroy_process_group()


def gpu_world_size() -> int:
    """The world size of the GPU tests that run at any size (tests/test_world_sizes.py):
    ``FLUXLITE_GPU_RANKS`` (scripts/gpu_suite.sh sets it to its NPROC), else every visible GPU."""
    if os.environ.get("FLUXLITE_GPU_RANKS"):
        return int(os.environ["FLUXLITE_GPU_RANKS"])
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def shared_gpus() -> bool:
    """``FLUXLITE_GPU_SHARE=1``: run multi-rank GPU tests with ranks sharing the GPUs there are
    (on a one-GPU machine, 2 ranks on one GPU over CUDA IPC and a gloo group). Protocol and numerics
    are checked as on separate GPUs; timings mean nothing."""
    return os.environ.get("FLUXLITE_GPU_SHARE") == "1"


def run_gpu_ranks(fn, world_size: int = 2, *args, env: dict | None = None, limit_s: float = 240) -> None:
    """Run ``fn`` on ``world_size`` GPU ranks; fail (and kill them) if they are not done in ``limit_s``.

    Needs ``world_size`` GPUs, or one with ``FLUXLITE_GPU_SHARE=1`` (:func:`shared_gpus`)."""
    if not torch.cuda.is_available() or torch.cuda.device_count() < (1 if shared_gpus() else world_size):
        pytest.skip(f"needs {world_size} CUDA GPUs (or one, with FLUXLITE_GPU_SHARE=1)")
    env = {**SAFE_ENV, "FLUXLITE_TIMEOUT_S": "60", "FLUXLITE_DUMP_AFTER_S": str(max(5.0, limit_s - 20)),
           **(env or {})}
    if os.environ.get("FLUXLITE_DUMP_AFTER_S"):
        env["FLUXLITE_DUMP_AFTER_S"] = os.environ["FLUXLITE_DUMP_AFTER_S"]
    ctx = mp.start_processes(_entry, args=(world_size, free_port(), fn, args, env), nprocs=world_size,
                             join=False, start_method="spawn")
    deadline = time.monotonic() + limit_s
    while not ctx.join(timeout=1.0):
        if time.monotonic() > deadline:
            for proc in ctx.processes:
                proc.kill()
            pytest.fail(f"GPU ranks still running after {limit_s} s: a hang")


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``||out - ref|| / ||ref||`` in float64; NaN (an unwritten, poisoned element) gives inf."""
    diff = (out.double() - ref.double()).norm().item()
    if diff != diff:
        return float("inf")
    return diff / max(ref.double().norm().item(), 1e-30)


def dev() -> torch.device:
    """This rank's CUDA device."""
    return torch.device("cuda", torch.cuda.current_device())


def ag_reference(a: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None):
    """float32 ``all_gather(a) @ w.T (+ b)`` and the gathered rows (NCCL all-gather)."""
    gathered = torch.empty((dist.get_world_size() * a.shape[0], a.shape[1]), dtype=a.dtype, device=a.device)
    dist.all_gather_into_tensor(gathered, a)
    ref = gathered.float() @ w.float().t()
    return (ref + b.float() if b is not None else ref), gathered


def ag_epilogue_reference(a: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, row_scale: torch.Tensor | None,
                          ep) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 ``epilogue(all_gather(a) @ w.T)`` with the row scales gathered as the rows are (``ep``:
    a :class:`fluxlite.epilogue.Epilogue`), and the gathered rows."""
    from fluxlite import epilogue

    product, gathered = ag_reference(a, w, None)
    scales = None
    if row_scale is not None:
        scales = torch.empty(dist.get_world_size() * row_scale.shape[0], device=row_scale.device)
        dist.all_gather_into_tensor(scales, row_scale.float())
    return epilogue.apply(product, ep, None if b is None else b.float(), scales, torch.float32), gathered


def rs_reference(a: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """float32 rows ``[r*M/W, (r+1)*M/W)`` of ``sum_ranks(a @ w.T) (+ b)`` (NCCL all-reduce)."""
    full = a.float() @ w.float().t()
    dist.all_reduce(full)
    mc = a.shape[0] // dist.get_world_size()
    ref = full[dist.get_rank() * mc : (dist.get_rank() + 1) * mc]
    return ref + b.float() if b is not None else ref
