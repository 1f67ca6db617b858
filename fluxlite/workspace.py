"""The symmetric workspace: a data buffer plus an int32 flag array on every rank of a group, each
addressable by every rank. One instance per (group, device), created lazily, reused across calls,
grown on demand (so any M works per call).

Layout of each rank's buffer::

    [ flags: int32[num_flag_slots(W)] | pad ][ parity 0 data ][ parity 1 data ]

Data is double-buffered by epoch parity. A region that a peer reads or writes during call ``e`` is
touched again by the same rank no earlier than call ``e + 2``, and every fused call waits on a
signal that each peer sends only after it finished its previous call. So no call can overwrite data
that a peer still uses, with no barrier between calls.

Backends
--------
- CUDA: ``torch.distributed._symmetric_memory`` (``empty`` + ``rendezvous``); peers' views come
  from ``get_buffer``.
- CUDA, when ranks share a GPU: CUDA IPC handles of plain allocations (torch's symmetric memory
  refuses overlapping devices).
- CPU: files in /dev/shm that every rank maps, with names agreed over the (gloo) group. Each file is
  unlinked as soon as all ranks mapped it, so nothing outlives the job even if a rank is killed.

The workspace only allocates and maps (docs/design.md). What a fused call keeps between calls
(epochs, the failure state, the plans, the producer) is :class:`fluxlite.fused.state.FusedState`,
one per workspace.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import signal
import tempfile
import threading
import time
import uuid
from typing import Callable

import torch
import torch.distributed as dist

from . import rendezvous, schedule
from .errors import FluxliteError
from .host_flags import resolve_timeout
from .group import TPGroup, resolve_group
from .process import PROCESS

DATA_ALIGN = 256  # bytes; TMA wants 16-byte aligned bases, and 256 keeps every region line-aligned


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def view_offset(nbytes: int) -> int:
    """Where a view that follows ``nbytes`` of a data half may start: rounded up to :data:`DATA_ALIGN`."""
    return _round_up(nbytes, DATA_ALIGN)


def shm_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


class _SharedFiles:
    """CPU backend: one /dev/shm file per rank and generation, mapped by every rank."""

    def __init__(self, tp: TPGroup, key: str, timeout_s: float) -> None:
        self.tp, self.key = tp, key
        tag = rendezvous.broadcast_str(tp, f"{key}/tag", uuid.uuid4().hex[:12] if tp.rank == 0 else None,
                                       timeout_s=timeout_s, op="workspace build", step="agree on shared-memory names")
        self.prefix = os.path.join(shm_dir(), f"fluxlite-{tag}")

    def path(self, generation: int, rank: int) -> str:
        return f"{self.prefix}-g{generation}-r{rank}"

    def allocate(self, nbytes: int, generation: int, timeout_s: float) -> list[torch.Tensor]:
        paths = [self.path(generation, p) for p in range(self.tp.world_size)]
        mine = paths[self.tp.rank]
        with _unlink_on_sigterm(paths):
            return self._map_all(paths, mine, nbytes, generation, timeout_s)

    def _map_all(self, paths: list[str], mine: str, nbytes: int, generation: int, timeout_s: float) -> list[torch.Tensor]:
        step = dict(timeout_s=timeout_s, op="workspace build", epoch=0)
        try:
            fd = os.open(mine, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.ftruncate(fd, nbytes)
            finally:
                os.close(fd)
            local = torch.from_file(mine, shared=True, size=nbytes, dtype=torch.uint8)
            local.zero_()  # pre-fault the pages now rather than inside a timed call
            rendezvous.barrier(self.tp, f"{self.key}/g{generation}/created", step="create shared memory", **step)
            views = [
                local if p == self.tp.rank else torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)
                for p, path in enumerate(paths)
            ]
            # Every rank holds every mapping: the names can go.
            rendezvous.barrier(self.tp, f"{self.key}/g{generation}/mapped", step="map peers' shared memory", **step)
        except BaseException:
            for path in paths:  # a failed peer may have left its file: take every name down
                _unlink(path)
            raise
        _unlink(mine)
        return views


@contextlib.contextmanager
def _unlink_on_sigterm(paths: list[str]):
    """While the names exist, a SIGTERM takes them down before the process goes.

    When one rank dies, torchrun and ``mp.spawn`` SIGTERM the survivors at once; by default that
    kills a survivor before its ``except`` clause can unlink a half-made generation. Python runs this
    handler as soon as the main thread is back from the blocking call (gloo reports the dead peer).
    Installed only from the main thread and only over the default disposition; then re-raised.
    """
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def on_sigterm(signum, frame):
        for path in paths:
            _unlink(path)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # runs a pending handler first


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class _SymmMem:
    """CUDA backend: torch symmetric memory."""

    def __init__(self, tp: TPGroup, device: torch.device, key: str, timeout_s: float) -> None:
        import torch.distributed._symmetric_memory as symm_mem

        self.tp, self.device, self.symm_mem, self.key = tp, device, symm_mem, key
        enabled = getattr(symm_mem, "is_symm_mem_enabled_for_group", lambda name: False)
        if hasattr(symm_mem, "enable_symm_mem_for_group") and not enabled(tp.name):
            symm_mem.enable_symm_mem_for_group(tp.name)
        self.handle = None

    def allocate(self, nbytes: int, generation: int, timeout_s: float) -> list[torch.Tensor]:
        local = self.symm_mem.empty(nbytes, dtype=torch.uint8, device=self.device)
        local.zero_()  # flags must start below every future epoch
        torch.cuda.current_stream(self.device).synchronize()
        # rendezvous is a collective with no timeout of ours: enter it only once every rank is here.
        step = dict(timeout_s=timeout_s, op="workspace build", epoch=0)
        rendezvous.barrier(self.tp, f"{self.key}/g{generation}/allocated", step="allocate symmetric memory", **step)
        self.handle = self.symm_mem.rendezvous(local, self.tp.group)
        rendezvous.barrier(self.tp, f"{self.key}/g{generation}/mapped", step="map peers' symmetric memory", **step)
        return [
            local if p == self.tp.rank else self.handle.get_buffer(p, (nbytes,), torch.uint8)
            for p in range(self.tp.world_size)
        ]


class _CudaIpc:
    """CUDA backend for ranks that share a GPU: CUDA IPC handles of ordinary allocations.

    torch's symmetric memory refuses ranks whose allocations are on one device ("detected
    allocations from overlapping devices"), and NCCL refuses two ranks on one GPU. Several ranks per
    GPU still make sense for trying TP on a workstation and for running the multi-rank protocol on a
    one-GPU machine (the tests do, with a gloo group that serves CUDA tensors). Kernels of different
    processes time-slice on one GPU, so a wait on a peer can cost a time slice: correct, never fast.
    """

    def __init__(self, tp: TPGroup, device: torch.device, key: str, timeout_s: float) -> None:
        self.tp, self.device, self.key = tp, device, key
        self.local: torch.Tensor | None = None

    def allocate(self, nbytes: int, generation: int, timeout_s: float) -> list[torch.Tensor]:
        import base64
        import pickle

        from torch.multiprocessing.reductions import reduce_tensor

        self.local = None
        local = torch.zeros(nbytes, dtype=torch.uint8, device=self.device)  # flags start below every epoch
        torch.cuda.current_stream(self.device).synchronize()
        rebuild, args = reduce_tensor(local)
        handles = rendezvous.all_gather_str(
            self.tp, f"{self.key}/g{generation}/ipc", base64.b64encode(pickle.dumps(args)).decode(),
            timeout_s=timeout_s, op="workspace build", step="exchange CUDA IPC handles")
        # Each peer's handle is opened on our GPU (torch opens it under the device it names): a buffer
        # that lives on another GPU (more ranks than GPUs, on several GPUs) is then mapped for our
        # kernels and copies through peer access, where opened on its own GPU it would be an address
        # that only that GPU's context can reach.
        device_arg = list(inspect.signature(rebuild).parameters).index("storage_device")

        def opened_here(peer: int, handle: str) -> torch.Tensor:
            rebuild_args = list(pickle.loads(base64.b64decode(handle)))
            rebuild_args[device_arg] = self.device.index
            try:
                return rebuild(*rebuild_args)
            except RuntimeError as exc:
                raise FluxliteError(
                    f"fluxlite: rank {self.tp.rank} on {self.device} cannot map peer rank {peer}'s buffer by CUDA "
                    f"IPC (ranks on different GPUs need peer access between them): {exc}") from exc

        views = [local if p == self.tp.rank else opened_here(p, h) for p, h in enumerate(handles)]
        # A rank frees its buffer only after every peer has opened it.
        rendezvous.barrier(self.tp, f"{self.key}/g{generation}/mapped", timeout_s=timeout_s, op="workspace build",
                           step="map peers' CUDA IPC memory")
        self.local = local
        return views


def _shares_a_gpu(tp: TPGroup, device: torch.device, key: str, timeout_s: float) -> bool:
    """Whether another rank of ``tp`` runs on the same physical GPU as this one (collective)."""
    uuid_ = str(torch.cuda.get_device_properties(device).uuid)
    uuids = rendezvous.all_gather_str(tp, f"{key}/gpu", uuid_, timeout_s=timeout_s, op="workspace build",
                                      step="compare GPUs")
    return len(set(uuids)) < len(uuids)


class SymmetricWorkspace:
    """Symmetric data buffer + flag array on every rank of ``tp``, on ``device``.

    Use :func:`get_workspace` rather than constructing one. Building and growing are collective and
    bounded by fluxlite's timeout: every rank must do them in the same order (the ops do), and a
    peer that never arrives gives :class:`~fluxlite.FluxliteTimeoutError` naming it. Every growth
    agrees on one size across ranks, so all ranks' buffers always have the same capacity and a
    peer's copy into ours can never run past it, even when the ranks disagree about a call.
    """

    def __init__(self, tp: TPGroup, device: torch.device, key: str, timeout_s: float) -> None:
        self.tp = tp
        self.device = device
        self.rank, self.world_size = tp.rank, tp.world_size
        self.key = key
        self.num_flags = schedule.num_flag_slots(self.world_size)
        self._flags_bytes = _round_up(4 * self.num_flags, DATA_ALIGN)
        self.capacity = 0  # data bytes per parity
        self.generation = 0  # allocations so far: addresses and views are valid for one generation
        self.failed: BaseException | None = None  # a growth that failed: the ranks' buffers may differ
        self._views: list[torch.Tensor] = []
        self._flags: list[torch.Tensor] = []
        self.is_cuda = device.type == "cuda"
        # Whether another rank of the group runs on this GPU (then peers map each other by CUDA IPC).
        self.shares_gpu = self.is_cuda and _shares_a_gpu(tp, device, key, timeout_s)
        if not self.is_cuda:
            self._backend = _SharedFiles(tp, key, timeout_s)
        elif self.shares_gpu:
            self._backend = _CudaIpc(tp, device, key, timeout_s)
        else:
            self._backend = _SymmMem(tp, device, key, timeout_s)
        self.reserve(1 << 20, timeout_s=timeout_s)

    # ---- sizes and growth -------------------------------------------------------------------
    def reserve(self, nbytes_per_parity: int, *, timeout_s: float | None = None, epoch: int = 0,
                abort: Callable[[], None] | None = None) -> None:
        """Make each parity half hold at least ``nbytes_per_parity`` bytes (collective when it grows).

        The ranks agree on the largest request, so every rank's buffer has the same capacity. The
        old buffers are dropped: no work of the caller's may still use them (the caller's CUDA
        stream is drained here; the fused layer drains its producer first, :meth:`FusedState.reserve
        <fluxlite.fused.state.FusedState.reserve>`). ``epoch`` names the call in a timeout's
        message; ``abort`` is called while waiting for the peers and may raise to give up early. A
        failure is kept in :attr:`failed`: the ranks may no longer agree on the buffers, and only
        :func:`fluxlite.release_workspaces` recovers.
        """
        if nbytes_per_parity <= self.capacity:
            return
        timeout_s = resolve_timeout(timeout_s)
        self.generation += 1
        try:
            # Every rank's device is done with the old buffers before the exchange below, so once it
            # returns no rank's copy engine can still read or write a buffer that is about to go.
            if self.is_cuda:
                wait_idle([torch.cuda.current_stream(self.device)], self, timeout_s)
            wanted = rendezvous.all_gather_int(
                self.tp, f"{self.key}/g{self.generation}/size", nbytes_per_parity, timeout_s=timeout_s,
                op="workspace growth" if self.capacity else "workspace build", step="agree on the workspace size",
                epoch=epoch, abort=abort)
            capacity = _round_up(max(max(wanted), 2 * self.capacity), 1 << 20)
            self._views = []
            self._views = self._backend.allocate(self._flags_bytes + 2 * capacity, self.generation, timeout_s)
        except BaseException as exc:
            self.failed = self.failed or exc
            raise
        # Flag arrays and addresses are used on every call: make them once per allocation.
        self._flags = [v[: 4 * self.num_flags].view(torch.int32) for v in self._views]
        self.capacity = capacity
        self._flag_addrs = [v.data_ptr() for v in self._views]
        self._data_addrs = [[v.data_ptr() + self._flags_bytes + parity * capacity for v in self._views]
                            for parity in (0, 1)]

    # ---- views --------------------------------------------------------------------------------
    def flags(self, rank: int) -> torch.Tensor:
        """int32 ``[num_flags]``: the flag array of ``rank`` (a peer's is a mapping of its memory)."""
        return self._flags[rank]

    def flag_addr(self, rank: int, slot: int = 0) -> int:
        """The address (mapped here) of int32 slot ``slot`` of ``rank``'s flag array."""
        return self._flag_addrs[rank] + 4 * slot

    def data_addr(self, rank: int, parity: int) -> int:
        """The address (mapped here) of ``rank``'s data half ``parity``."""
        return self._data_addrs[parity][rank]

    def data(self, rank: int, parity: int, shape: tuple[int, ...], dtype: torch.dtype, offset: int = 0) -> torch.Tensor:
        """A ``shape``/``dtype`` view of ``rank``'s data half ``parity``, ``offset`` bytes in."""
        nbytes = _numel(shape) * dtype.itemsize
        if offset % DATA_ALIGN or offset + nbytes > self.capacity:
            raise ValueError(f"data view [{offset}, {offset + nbytes}) is outside the reserved {self.capacity} bytes")
        start = self._flags_bytes + parity * self.capacity + offset
        return self._views[rank][start : start + nbytes].view(dtype).view(shape)

    def close(self, timeout_s: float | None = None) -> None:
        """Let go of the buffers once the caller's CUDA stream is done with them (bounded; see
        :func:`wait_idle`). The fused layer closes its producer first (:func:`fluxlite.release_workspaces`)."""
        timeout_s = resolve_timeout(timeout_s)
        try:
            if self.is_cuda:
                wait_idle([torch.cuda.current_stream(self.device)], self, timeout_s)
        finally:
            self._views, self._flags = [], []


def wait_idle(streams: list, ws: SymmetricWorkspace, timeout_s: float) -> None:
    """CUDA: wait until every stream of ``streams`` is idle, bounded.

    Every stream wait fluxlite enqueues ends when a bounded kernel ends, so this returns within
    about one timeout; past two, the device is stuck and the error says so.
    """
    events = []
    for stream in streams:
        event = torch.cuda.Event()
        event.record(stream)
        events.append(event)
    deadline = time.monotonic() + 2 * timeout_s + 5.0
    delay = 1e-5
    while not all(e.query() for e in events):
        if time.monotonic() > deadline:
            raise FluxliteError(
                f"fluxlite: rank {ws.rank}'s device work on {ws.device} did not finish within "
                f"{2 * timeout_s + 5.0:g} s; the GPU is stuck and this process must be restarted")
        time.sleep(delay)  # a bounded poll of device completion, not a synchronisation between ranks
        delay = min(2 * delay, 1e-3)


def capturing(device: torch.device) -> bool:
    """Whether work for ``device`` is being captured into a CUDA graph now (the current stream is
    capturing). The one test of the capture rules (docs/cuda_graphs.md); never true on CPU."""
    # torch.cuda.is_current_stream_capturing()'s own test, without its Python frame (every fused call asks)
    return device.type == "cuda" and torch._C._cuda_isCurrentStreamCapturing()  # a CUDA device: CUDA is there


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _check_device(tp: TPGroup, device) -> torch.device:
    try:
        device = torch.device(device)
    except (TypeError, RuntimeError) as exc:
        raise ValueError(f"device must be a torch.device or a device string, got {device!r}") from exc
    if device.type not in tp.device_types:
        raise ValueError(
            f"device: the process group's backend serves only {sorted(tp.device_types)} tensors, got "
            f"{device}; use a group whose backend handles {device.type}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device: {device} needs CUDA, but this torch build or machine has none")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device.index != torch.cuda.current_device():
            raise ValueError(f"device: expected the current CUDA device cuda:{torch.cuda.current_device()}, "
                             f"got {device}; call torch.cuda.set_device({device.index}) first")
    return device


@contextlib.contextmanager
def lasting():
    """The context in which fluxlite makes what outlives a call: the workspace, the fused state, the
    plans, the scratch buffer and the views it keeps of them. Later calls update them in place, in
    whatever mode they run; made under ``torch.inference_mode()`` they would be inference tensors,
    which no call outside it may update (a dtype view made there is one too). ``inference_mode(False)``
    turns grad mode back on, so ``no_grad`` follows it."""
    with torch.inference_mode(False), torch.no_grad():
        yield


def get_workspace(group: dist.ProcessGroup | None = None, device: torch.device | str | None = None,
                  *, timeout: float | None = None) -> SymmetricWorkspace:
    """The cached workspace of (group, device); created (collectively, bounded by ``timeout``) on
    first use. ``device`` defaults to the current CUDA device when the group serves CUDA, else CPU."""
    tp = resolve_group(group)
    if isinstance(device, torch.device) and device.index is not None or device == "cpu":
        ws = PROCESS.workspaces.get((id(tp.group), str(device)))  # the ops' path: a tensor's device, already checked
        if ws is not None:
            return ws
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if "cuda" in tp.device_types and torch.cuda.is_available() else torch.device("cpu")
    device = _check_device(tp, device)
    key = (id(tp.group), str(device))
    ws = PROCESS.workspaces.get(key)
    if ws is None:
        if capturing(device):
            raise FluxliteError(
                "fluxlite: a CUDA graph is capturing a fused call before its workspace exists (building one is a "
                "collective with allocations and synchronisations): run each fused call once eagerly, with the "
                "shapes you capture, before capturing")
        # Keys of the store-based collectives: ``rel{releases}/{device type}/w{workspaces made}``.
        # Every rank follows the same sequence of builds and releases, so the keys agree without
        # communication, and a failed build never leaves a key that a later build could mistake for
        # an arrival.
        n = PROCESS.workspace_builds.get((tp.name, device.type), 0)
        PROCESS.workspace_builds[(tp.name, device.type)] = n + 1
        with lasting():
            ws = SymmetricWorkspace(tp, device, f"rel{PROCESS.workspace_releases}/{device.type}/w{n}",
                                    resolve_timeout(timeout))
        PROCESS.workspaces[key] = ws
    return ws


def forget_workspaces() -> list[SymmetricWorkspace]:
    """Forget every cached workspace (and the groups resolved for them); returns them for
    :func:`fluxlite.release_workspaces` to close, after the fused layer's producers."""
    return PROCESS.forget_workspaces()
