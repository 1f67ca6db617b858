"""The decomposed implementations: per-peer chunks of the collective overlapped with chunked matmuls.

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

from ._sequential import epilogue_linear
from .epilogue import PLAIN, Epilogue
from .epilogue import apply as apply_epilogue
from .group import TPGroup


class _CopyIn:
    """The last "work" of a step staged through host memory: copies the received rows to the device."""

    def __init__(self, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.pairs = pairs  # (host buffer, device destination)

    def wait(self) -> None:
        for host, dest in self.pairs:
            dest.copy_(host)


def _exchange(tp: TPGroup, sends: list[tuple[torch.Tensor, int]], recvs: list[tuple[torch.Tensor, int]]) -> list:
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


def _wait(works: list) -> None:
    for work in works:
        work.wait()


def ag_gemm(tp: TPGroup, a: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
            out: torch.Tensor | None = None, ep: Epilogue = PLAIN, row_scale: torch.Tensor | None = None):
    """``(ep(all_gather(a) @ weight.T), all_gather(a))``, the gather overlapped with the matmul.

    ``a: [m, K]``, ``weight: [N, K]`` (``[2N, K]`` for SwiGLU), ``row_scale: [m]`` fp32 (gathered
    with the rows) -> ``out: [W*m, N]``, ``gathered: [W*m, K]`` (rank-major rows).
    """
    W, r = tp.world_size, tp.rank
    m = a.shape[0]
    gathered = a.new_empty((W * m, a.shape[1]))
    scales = None if row_scale is None else row_scale.new_empty(W * m)
    if out is None:
        out = a.new_empty((W * m, ep.out_features(weight.shape[0])))
    steps = []
    for i in range(1, W):
        src = (r + i) % W
        sends, recvs = [(a, (r - i) % W)], [(gathered[src * m : (src + 1) * m], src)]
        if row_scale is not None:
            sends.append((row_scale, (r - i) % W))
            recvs.append((scales[src * m : (src + 1) * m], src))
        steps.append(_exchange(tp, sends, recvs))
    local = slice(r * m, (r + 1) * m)
    epilogue_linear(out[local], a, weight, bias, ep, row_scale)  # overlaps every step
    gathered[local].copy_(a)
    if scales is not None:
        scales[local].copy_(row_scale)
    for i, works in enumerate(steps, start=1):
        _wait(works)
        rows = slice((r + i) % W * m, ((r + i) % W + 1) * m)
        epilogue_linear(out[rows], gathered[rows], weight, bias, ep, None if scales is None else scales[rows])
    return out, gathered


def gemm_rs(tp: TPGroup, a: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
            out: torch.Tensor | None = None, ep: Epilogue = PLAIN) -> torch.Tensor:
    """``ep(reduce_scatter(a @ weight.T))``, each peer's partial sent while the next is computed.

    ``a: [M, K_local]``, ``weight: [N, K_local]`` -> ``[M/W, N]``: rows ``[r*M/W, (r+1)*M/W)`` of the
    sum over ranks; ``ep.scale`` and the bias apply once, after the reduction.
    """
    W, r = tp.world_size, tp.rank
    mc = a.shape[0] // W
    N = weight.shape[0]
    partials = a.new_empty((W, mc, N))  # [d]: our partial of rank d's rows; [r] stays here
    received = a.new_empty((W, mc, N))  # [p]: rank p's partial of our rows
    steps = []
    for i in range(1, W):
        dst, src = (r + i) % W, (r - i) % W
        torch.matmul(a[dst * mc : (dst + 1) * mc], weight.t(), out=partials[dst])
        steps.append(_exchange(tp, [(partials[dst], dst)], [(received[src], src)]))
    acc = (a[r * mc : (r + 1) * mc] @ weight.t()).to(torch.promote_types(a.dtype, torch.float32))
    for works in steps:
        _wait(works)
    for p in range(W):  # a fixed order on every rank
        if p != r:
            acc += received[p]
    reduced = apply_epilogue(acc, ep, bias, None, a.dtype)
    if out is None:
        return reduced
    return out.copy_(reduced)
