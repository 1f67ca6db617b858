"""Resolve the tensor-parallel process group and the devices its backends can serve."""

from __future__ import annotations

import atexit
import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .process import PROCESS

# Which device types each c10d backend moves tensors of.
_BACKEND_DEVICES = {"gloo": "cpu", "nccl": "cuda"}


@dataclass(frozen=True)
class TPGroup:
    """A tensor-parallel group: ``rank`` of ``world_size``, the device types it can serve, and whether
    gloo serves its CUDA tensors (ranks sharing GPUs, :func:`init`)."""

    group: dist.ProcessGroup
    rank: int
    world_size: int
    device_types: frozenset[str]
    gloo_serves_cuda: bool = False

    @property
    def name(self) -> str:
        return self.group.group_name


def _backends(group: dist.ProcessGroup) -> dict[str, str]:
    """The backend serving each device type: get_backend gives "gloo", "nccl", or a device map such
    as "cpu:gloo,cuda:nccl"."""
    backends = {}
    for part in str(dist.get_backend(group)).split(","):
        if ":" in part:
            dev, name = part.split(":", 1)
            backends[dev.strip()] = name.strip()
        elif part.strip() in _BACKEND_DEVICES:
            backends[_BACKEND_DEVICES[part.strip()]] = part.strip()
    return backends


def resolve_group(group: dist.ProcessGroup | None = None) -> TPGroup:
    """The TP group: ``group`` if given, else the default process group.

    Raises ``ValueError`` if torch.distributed is not initialised. The answer is cached per group
    (each call of an op resolves its group) in :data:`fluxlite.process.PROCESS`.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError(
            "group: fluxlite needs an initialised process group (expected torch.distributed to be "
            "initialised, got none): call fluxlite.init() or torch.distributed.init_process_group "
            "first, e.g. under torchrun"
        )
    if group is None:
        group = dist.group.WORLD
    if not isinstance(group, dist.ProcessGroup):
        if group is dist.GroupMember.NON_GROUP_MEMBER:  # what new_group() returns on a rank it leaves out
            raise ValueError(f"group: this rank (global rank {dist.get_rank()}) is not a member of the group "
                             "(torch.distributed.new_group returned GroupMember.NON_GROUP_MEMBER here); call "
                             "the op only on the group's ranks")
        raise TypeError(f"group must be a torch.distributed.ProcessGroup or None, got {type(group).__name__}")
    # By name, not id(): Dynamo traces a group's name (the layers resolve groups inside compiled
    # forwards) but not id() of it. A name comes back after destroy_process_group: hence the identity check.
    tp = PROCESS.groups.get(group.group_name)
    if tp is not None and tp.group is group:
        return tp
    backends = _backends(group)
    tp = TPGroup(
        group=group,
        rank=dist.get_rank(group),
        world_size=dist.get_world_size(group),
        device_types=frozenset(backends),
        gloo_serves_cuda=backends.get("cuda") == "gloo",
    )
    PROCESS.groups[group.group_name] = tp
    if "cpu" in tp.device_types:
        _drain_gloo_at_exit()
    return tp


# A c10d gloo worker thread lets go of a finished collective only after the caller's wait() has
# returned, and letting go takes the GIL: the work holds Python-wrapped tensors (torch keeps a
# tensor's PyObject alive while C++ holds the tensor and drops it under the GIL) and the caller's
# thread-local state (in a backward: the Python context autograd stashes there). When a script ends
# right after a collective (the layers' last backward), CPython may be finalizing by then, and
# CPython < 3.14 ends a thread that asks for the GIL then with pthread_exit: inside the work's
# noexcept destructor, that is std::terminate ("terminate called without an active exception",
# SIGABRT) after a clean run. atexit handlers run before finalization starts: release the GIL there
# for long enough that the workers finish. (The groups outlive destroy_process_group() while the
# layers hold them, so their threads are never joined before exit.)
_EXIT_GRACE_S = 0.05


def free_local_port() -> int:
    """A TCP port on 127.0.0.1 for a rank-0 store to listen on, free when checked, drawn below the
    kernel's ephemeral port range.

    A port that the kernel hands out for a bind to port 0 comes from that range, from which every
    outgoing connection of every process (other jobs' ranks, NCCL's and the stores' clients) takes
    its local port too: between this check and rank 0's listen one may take it, and the job fails
    with ``EADDRINUSE``. Below the range only another listener can."""
    import random
    import socket

    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            top = min(int(f.read().split()[0]), 32768)
    except (OSError, ValueError, IndexError):
        top = 32768
    draw = random.SystemRandom()
    for _ in range(64):
        port = draw.randrange(top // 2, top)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # every draw taken: whatever the kernel gives
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent() -> None:
    """End this process when the one that started it ends (Linux's ``PR_SET_PDEATHSIG``; elsewhere
    nothing): for ranks that a tool spawns, so that a tool killed outright (``SIGKILL``, a time
    limit) leaves no rank behind spinning in a wait on a GPU that later jobs use."""
    import ctypes
    import signal

    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent ended before the request
        os._exit(1)


def _drain_gloo_at_exit() -> None:
    if not PROCESS.exit_grace_registered:
        PROCESS.exit_grace_registered = True
        atexit.register(time.sleep, _EXIT_GRACE_S)


def init(backend: str | None = None) -> TPGroup:
    """Bring up the default process group from torchrun's environment and return it as a TPGroup.

    Picks NCCL when CUDA is present (and binds this process to ``cuda:LOCAL_RANK``), else gloo.
    With more local ranks than GPUs (trying TP on a one-GPU workstation), ranks share GPUs
    (``cuda:LOCAL_RANK % GPUs``) over a gloo group that serves CUDA tensors, since NCCL refuses two
    ranks on one GPU; the fused ops then map peers with CUDA IPC. Correct, but not fast.
    Does nothing but resolve the group if one is already initialised.
    """
    if not dist.is_initialized():
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if backend is None:
            shared = gpus and int(os.environ.get("LOCAL_WORLD_SIZE", "1")) > gpus
            backend = "gloo" if not gpus else "cpu:gloo,cuda:gloo" if shared else "nccl"
        if backend == "nccl":
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
            dist.init_process_group(backend=backend, device_id=device)
        else:
            if gpus and "cuda" in backend:  # ranks may share GPUs here
                torch.cuda.set_device(local_rank % gpus)
            dist.init_process_group(backend=backend)
    return resolve_group()
