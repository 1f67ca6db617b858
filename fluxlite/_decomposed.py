"""The decomposed implementations' transport: per-peer chunks of a collective as point-to-point steps,
overlapped with chunked matmuls (each op's ``decomposed`` method, :mod:`fluxlite.ops`).

This is what PyTorch's async-TP does where it has no symmetric memory: the collective is cut into
``W - 1`` point-to-point steps, and the matmul of one chunk runs while the next chunk is on the
wire. It needs only the process group (gloo or NCCL), no workspace, no P2P mapping, so it also
works across nodes and on GPUs without NVLink.

Step ``i`` (``1 <= i < W``) is a permutation: rank ``r`` sends to ``r - i`` and receives from
``r + i`` (AG), or sends to ``r + i`` and receives from ``r - i`` (RS), batched as one
``batch_isend_irecv`` so that NCCL can never order a send ahead of its matching receive.

- **AG-GEMM:** all steps are issued at once; the local rows' matmul runs first, then chunk
  ``r + 1``, ``r + 2``, ... as each step's rows arrive (the order of :mod:`fluxlite.schedule`).
- **GEMM-RS:** the partial of chunk ``r + 1`` is computed first and sent while the partial of
  ``r + 2`` is computed, and so on; the local partial is computed last. The received partials are
  summed in fp32 (fp64 stays fp64), in a fixed order, and the epilogue (scale, bias) is applied once.

Streams and lifetimes (CUDA): the point-to-point work runs on NCCL's own stream, which waits for
the current stream when a step is issued (so AG's ``a`` and each RS partial are complete before
they leave); ``work.wait()`` makes the current stream wait for a step before its data is used.
Every step is waited on before a function returns, so every buffer the communication touches is
last used in the current stream's order, and the caching allocator cannot reuse it early: no
``record_stream`` is needed. On CPU (gloo) the same calls are asynchronous on gloo's threads.

Bounded waits: every wait here is a wait on a gloo/NCCL work, bounded by the process group's own
timeout (``init_process_group(timeout=...)``), not by fluxlite's.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .group import TPGroup


class _CopyIn:
    """The last "work" of a step staged through host memory: copies the received rows to the device."""

    def __init__(self, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.pairs = pairs  # (host buffer, device destination)

    def wait(self) -> None:
        for host, dest in self.pairs:
            dest.copy_(host)


def exchange(tp: TPGroup, sends: list[tuple[torch.Tensor, int]], recvs: list[tuple[torch.Tensor, int]]) -> list:
    """Issue one batch of sends ``(tensor, group rank)`` and receives; returns the works (not waited).

    Where gloo serves CUDA tensors (ranks sharing GPUs), the tensors go through host memory: gloo's
    point-to-point ops read and write the raw pointer, so a device pointer fails (EFAULT). The sends
    are copied out here (which waits for the current stream); the receives are copied in by the
    step's last work."""
    g = tp.group
    copy_in = []
    if tp.gloo_serves_cuda:
        sends = [(t.cpu() if t.is_cuda else t, p) for t, p in sends]
        staged = []
        for t, p in recvs:
            if t.is_cuda:
                host = torch.empty(t.shape, dtype=t.dtype)
                copy_in.append((host, t))
                t = host
            staged.append((t, p))
        recvs = staged
    ops = [dist.P2POp(dist.isend, t, dist.get_global_rank(g, p), g, tag) for tag, (t, p) in enumerate(sends)]
    ops += [dist.P2POp(dist.irecv, t, dist.get_global_rank(g, p), g, tag) for tag, (t, p) in enumerate(recvs)]
    works = dist.batch_isend_irecv(ops)
    return works + [_CopyIn(copy_in)] if copy_in else works


def wait_all(works: list) -> None:
    """Wait for every work of a step (:func:`exchange`)."""
    for work in works:
        work.wait()
