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
  from ``get_buffer``. The producer is a high-priority side stream built only of copies and stream
  memory operations.
- CPU: files in /dev/shm that every rank maps, with names agreed over the (gloo) group. Each file is
  unlinked as soon as all ranks mapped it, so nothing outlives the job even if a rank is killed.
  The producer is one worker thread.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist

from . import schedule
from .errors import FluxliteError, timeout_from_record
from .group import TPGroup, resolve_group

_ALIGN = 256  # bytes; TMA wants 16-byte aligned bases, and 256 keeps every region line-aligned


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def shm_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


class _SharedFiles:
    """CPU backend: one /dev/shm file per rank and generation, mapped by every rank."""

    def __init__(self, tp: TPGroup) -> None:
        self.tp = tp
        tag = [uuid.uuid4().hex[:12] if tp.rank == 0 else None]
        dist.broadcast_object_list(tag, src=dist.get_global_rank(tp.group, 0), group=tp.group)
        self.prefix = os.path.join(shm_dir(), f"fluxlite-{tag[0]}")
        self.generation = 0

    def path(self, generation: int, rank: int) -> str:
        return f"{self.prefix}-g{generation}-r{rank}"

    def allocate(self, nbytes: int) -> list[torch.Tensor]:
        self.generation += 1
        paths = [self.path(self.generation, p) for p in range(self.tp.world_size)]
        mine = paths[self.tp.rank]
        with _unlink_on_sigterm(paths):
            return self._map_all(paths, mine, nbytes)

    def _map_all(self, paths: list[str], mine: str, nbytes: int) -> list[torch.Tensor]:
        try:
            fd = os.open(mine, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.ftruncate(fd, nbytes)
            finally:
                os.close(fd)
            local = torch.from_file(mine, shared=True, size=nbytes, dtype=torch.uint8)
            local.zero_()  # pre-fault the pages now rather than inside a timed call
            dist.barrier(group=self.tp.group)
            views = [
                local if p == self.tp.rank else torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)
                for p, path in enumerate(paths)
            ]
            dist.barrier(group=self.tp.group)  # every rank holds every mapping: the names can go
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

    def __init__(self, tp: TPGroup, device: torch.device) -> None:
        import torch.distributed._symmetric_memory as symm_mem

        self.tp, self.device, self.symm_mem = tp, device, symm_mem
        enabled = getattr(symm_mem, "is_symm_mem_enabled_for_group", lambda name: False)
        if hasattr(symm_mem, "enable_symm_mem_for_group") and not enabled(tp.name):
            symm_mem.enable_symm_mem_for_group(tp.name)
        self.handle = None

    def allocate(self, nbytes: int) -> list[torch.Tensor]:
        # Peers may still read the old buffer: every rank drains its device before anyone frees.
        torch.cuda.synchronize(self.device)
        local = self.symm_mem.empty(nbytes, dtype=torch.uint8, device=self.device)
        local.zero_()  # flags must start below every future epoch
        torch.cuda.synchronize(self.device)
        self.handle = self.symm_mem.rendezvous(local, self.tp.group)
        dist.barrier(group=self.tp.group, device_ids=[self.device.index])
        return [
            local if p == self.tp.rank else self.handle.get_buffer(p, (nbytes,), torch.uint8)
            for p in range(self.tp.world_size)
        ]


class SymmetricWorkspace:
    """Symmetric data buffer + flag array on every rank of ``tp``, on ``device``.

    Use :func:`get_workspace` rather than constructing one. All methods that allocate are
    collective: every rank must call them in the same order with the same sizes (the ops do).
    """

    def __init__(self, tp: TPGroup, device: torch.device) -> None:
        self.tp = tp
        self.device = device
        self.rank, self.world_size = tp.rank, tp.world_size
        self.num_flags = schedule.num_flag_slots(self.world_size)
        self._flags_bytes = _round_up(4 * self.num_flags, _ALIGN)
        self.epoch = 0
        self.capacity = 0  # data bytes per parity
        self._views: list[torch.Tensor] = []
        self._flags: list[torch.Tensor] = []
        self._poison: BaseException | None = None
        self._poison_raised = False
        self.is_cuda = device.type == "cuda"
        if self.is_cuda:
            self._backend = _SymmMem(tp, device)
            self.producer_stream = torch.cuda.Stream(device=device, priority=-1)
        else:
            self._backend = _SharedFiles(tp)
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fluxlite-producer")
        # A kernel's timeout record: [code, slot, epoch, seen, peer, chunk, split, spare].
        self.error = torch.zeros(8, dtype=torch.int32, device=device)
        self._err_host = self._err_event = None
        self._timeout_s = 0.0
        self._blocks_cache: dict[tuple, torch.Tensor] = {}
        # RS tile counters per (chunk, split), then the kernel's tile-claim counter; zeroed per call.
        self.counters = torch.zeros(self.world_size * schedule.MAX_SPLITS + 1, dtype=torch.int32, device=device)
        self.reserve(1 << 20)
        if self.is_cuda:
            self._warm_up()

    # ---- sizes and growth -------------------------------------------------------------------
    def reserve(self, nbytes_per_parity: int) -> None:
        """Make each parity half hold at least ``nbytes_per_parity`` bytes (collective when it grows)."""
        if nbytes_per_parity <= self.capacity:
            return
        capacity = _round_up(max(nbytes_per_parity, 2 * self.capacity), 1 << 20)
        self._views = self._backend.allocate(self._flags_bytes + 2 * capacity)
        # Flag arrays are read on every call: make their views once per allocation.
        self._flags = [v[: 4 * self.num_flags].view(torch.int32) for v in self._views]
        self.capacity = capacity
        self._ptr_cache = None
        self._data_ptr_cache: dict[tuple[int, int], torch.Tensor] = {}

    # ---- views --------------------------------------------------------------------------------
    def flags(self, rank: int) -> torch.Tensor:
        """int32 ``[num_flags]``: the flag array of ``rank`` (a peer's is a mapping of its memory)."""
        return self._flags[rank]

    def data(self, rank: int, parity: int, shape: tuple[int, ...], dtype: torch.dtype, offset: int = 0) -> torch.Tensor:
        """A ``shape``/``dtype`` view of ``rank``'s data half ``parity``, ``offset`` bytes in."""
        nbytes = _numel(shape) * _itemsize(dtype)
        if offset % _ALIGN or offset + nbytes > self.capacity:
            raise ValueError(f"data view [{offset}, {offset + nbytes}) is outside the reserved {self.capacity} bytes")
        start = self._flags_bytes + parity * self.capacity + offset
        return self._views[rank][start : start + nbytes].view(dtype).view(shape)

    def flag_ptrs(self) -> torch.Tensor:
        """int64 ``[W]`` on the workspace's device: the address of every rank's flag array."""
        if self._ptr_cache is None:
            ptrs = [f.data_ptr() for f in self._flags]
            self._ptr_cache = torch.tensor(ptrs, dtype=torch.int64, device=self.device)
        return self._ptr_cache

    def data_ptrs(self, parity: int, offset: int = 0) -> torch.Tensor:
        """int64 ``[W]`` on the workspace's device: every rank's data half ``parity``, ``offset`` bytes in."""
        key = (parity, offset)
        if key not in self._data_ptr_cache:
            start = self._flags_bytes + parity * self.capacity + offset
            ptrs = [view.data_ptr() + start for view in self._views]
            self._data_ptr_cache[key] = torch.tensor(ptrs, dtype=torch.int64, device=self.device)
        return self._data_ptr_cache[key]

    def device_blocks(self, sched: schedule.TileSchedule) -> torch.Tensor:
        """The schedule's block table on this workspace's device (cached per schedule)."""
        return self._device_table("blocks", sched, lambda: sched.blocks)

    def device_split_rows(self, sched: schedule.TileSchedule) -> torch.Tensor:
        """int32 ``[splits + 1]``: split ``s`` covers rows ``[t[s], t[s+1])`` of a chunk (cached)."""
        return self._device_table("split_rows", sched, lambda: torch.tensor(
            [sched.split_rows(s)[0] for s in range(sched.splits)] + [sched.chunk_rows], dtype=torch.int32))

    def _device_table(self, kind: str, sched: schedule.TileSchedule, make) -> torch.Tensor:
        key = (kind, sched.op, sched.world_size, sched.rank, sched.chunk_rows, sched.block_m, sched.splits)
        table = self._blocks_cache.get(key)
        if table is None:
            table = self._blocks_cache[key] = make().to(self.device)
        return table

    # ---- epochs and failure -------------------------------------------------------------------
    def next_epoch(self) -> int:
        """Start a call: raise if an earlier call failed, else return the new epoch."""
        self.check()
        self.epoch += 1
        if self.epoch >= 2**31 - 1:
            raise FluxliteError("fluxlite workspace epoch overflowed int32; release and recreate the workspace")
        return self.epoch

    def poison(self, exc: BaseException, *, raised: bool = True) -> None:
        """Mark the workspace unusable after a failure: peers' flags and buffers no longer agree.

        ``raised=False`` when the failure (a GPU kernel's record) has not been raised to the caller
        yet: the next :meth:`check` raises it as it is, later ones raise "poisoned".
        """
        if self._poison is None:
            self._poison, self._poison_raised = exc, raised

    def check(self) -> None:
        """Raise if an earlier call failed, including a timeout a GPU kernel recorded and that has
        become visible without blocking (see :meth:`note_kernel_launch`)."""
        if self.is_cuda and self._poison is None and self._err_event is not None and self._err_event.query():
            self._poison_from_record(self._err_host.tolist())
        if self._poison is None:
            return
        if not self._poison_raised:
            self._poison_raised = True
            raise self._poison
        raise FluxliteError(f"fluxlite workspace is poisoned by an earlier failure: {self._poison}") from self._poison

    def read_kernel_error(self, timeout_s: float) -> None:
        """Read the kernel error record now (blocking); a recorded timeout poisons the workspace."""
        self._timeout_s = timeout_s
        self._poison_from_record(self.error.tolist())

    def _poison_from_record(self, rec: list[int]) -> None:
        if rec[0] != 0:
            self.poison(timeout_from_record(rec, rank=self.rank, timeout_s=self._timeout_s), raised=False)

    def note_kernel_launch(self, timeout_s: float) -> None:
        """After a fused launch on CUDA: copy the error record to pinned memory without blocking,
        so the next call (or :meth:`synchronize`) raises a timeout that the kernel recorded."""
        self._timeout_s = timeout_s
        if self._err_event is None:
            self._err_host = torch.zeros(8, dtype=torch.int32, pin_memory=True)
            self._err_event = torch.cuda.Event()
        self._err_host.copy_(self.error, non_blocking=True)
        self._err_event.record()

    def synchronize(self) -> None:
        """Wait for this workspace's device work; raise the failure of any earlier call."""
        if self.is_cuda:
            torch.cuda.synchronize(self.device)
            self._poison_from_record(self.error.tolist())
        self.check()

    # ---- producers ------------------------------------------------------------------------------
    def submit(self, fn, *args, **kwargs):
        """CPU: run ``fn`` on the producer thread (the CPU's side stream); returns a Future."""
        return self._executor.submit(fn, *args, **kwargs)

    def _warm_up(self) -> None:
        """Run every producer-side operation once while nothing spins (see _cuda_driver)."""
        from . import _cuda_driver

        stream = self.producer_stream
        scratch = torch.empty(2, 64, dtype=torch.uint8, device=self.device)
        with torch.cuda.stream(stream):
            scratch[1].copy_(scratch[0])
            peer = self.data((self.rank + 1) % self.world_size, 0, (64,), torch.uint8)
            scratch[0].copy_(peer)
            word = self.counters.data_ptr()
            _cuda_driver.stream_write_value32(stream, word, 0)
            _cuda_driver.stream_wait_value32(stream, word, 0)
        stream.synchronize()
        torch.cuda.synchronize(self.device)

    def close(self) -> None:
        if not self.is_cuda:
            self._executor.shutdown(wait=True)
        self._views, self._flags = [], []


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


_WORKSPACES: dict[tuple[int, str], SymmetricWorkspace] = {}


def get_workspace(group: dist.ProcessGroup | None = None, device: torch.device | str | None = None) -> SymmetricWorkspace:
    """The cached workspace of (group, device); created (collectively) on first use."""
    tp = resolve_group(group)
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if "cuda" in tp.device_types and torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    key = (id(tp.group), str(device))
    ws = _WORKSPACES.get(key)
    if ws is None:
        ws = SymmetricWorkspace(tp, device)
        _WORKSPACES[key] = ws
    return ws


def workspaces_of(group: dist.ProcessGroup) -> list[SymmetricWorkspace]:
    """The cached workspaces of ``group`` (one per device)."""
    return [ws for (gid, _), ws in _WORKSPACES.items() if gid == id(group)]


def release_workspaces() -> None:
    """Drop every cached workspace (call on every rank, e.g. before destroying the process group)."""
    for ws in _WORKSPACES.values():
        ws.close()
    _WORKSPACES.clear()
