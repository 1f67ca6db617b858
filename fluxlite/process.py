"""What fluxlite keeps in one process between calls, on one object: :data:`PROCESS`.

Every cache of the runtime that outlives a call hangs off it, so one place says what a process
remembers, and
:meth:`Process.reset` forgets it (tests; after :func:`fluxlite.release_workspaces` has let the
buffers go). Nothing here is shared with other processes: each rank has its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Process:
    """This process's caches (fields are filled by the modules named in their comments)."""

    groups: dict[str, Any] = field(default_factory=dict)  # group name -> TPGroup (fluxlite.group)
    workspaces: dict[tuple[int, str], Any] = field(default_factory=dict)  # (id(group), device) -> SymmetricWorkspace
    workspace_builds: dict[tuple[str, str], int] = field(default_factory=dict)  # (group, device type) -> built
    fused_states: dict[Any, Any] = field(default_factory=dict)  # SymmetricWorkspace -> FusedState (fluxlite.fused)
    timeout_override: float | None = None  # fluxlite.set_default_timeout
    dispatch: Any = None  # fluxlite.dispatch's caches (its _State), made when it is imported
    dispatch_timers: dict = field(default_factory=dict)  # (group, device) -> Timer for auto's measurements
    plain_gemm: dict = field(default_factory=dict)  # fluxlite.kernels.ag_gemm.gemm: tables and kernels
    repitch: dict = field(default_factory=dict)  # device index -> compiled copies (fluxlite.kernels.repitch)
    repeats: dict[str, dict] = field(default_factory=dict)  # op name -> its remembered fused calls (fluxlite.ops.op)
    warned: set = field(default_factory=set)  # keys of the warnings given once (fluxlite.parallel.utils.warn_once)
    kernel_specialization: dict = field(default_factory=dict)  # Triton kernel -> which args it specialises on (kernels.launch)
    # Counters whose values name keys in the process group's store: they only ever go up, and
    # reset() keeps them, so a key is never used twice in a process.
    workspace_releases: int = 0  # workspace releases so far: the prefix of the workspaces' store keys
    agreement_rounds: dict[str, Any] = field(default_factory=dict)  # group -> count of auto's agreements
    # Retained once per process and never released (fluxlite._cuda_driver), so reset() keeps them too.
    primary_contexts: dict[int, int] = field(default_factory=dict)  # device index -> its primary CUcontext
    # The interpreter's exit hook for gloo's worker threads (fluxlite.group) is registered once per
    # process, and reset() keeps the mark: atexit cannot take it back.
    exit_grace_registered: bool = False

    def forget_workspaces(self) -> list:
        """Forget the workspaces (and the groups resolved for them) and start new store
        keys; returns the workspaces for their owner to close."""
        workspaces = list(self.workspaces.values())
        self.workspaces.clear()
        self.repeats.clear()  # their states and plans hold views of the workspaces' buffers
        self.workspace_builds.clear()
        self.groups.clear()
        self.workspace_releases += 1
        return workspaces

    def reset(self) -> None:
        """Forget every cache (the store-key counters go on)."""
        self.forget_workspaces()
        self.fused_states.clear()
        self.timeout_override = None
        if self.dispatch is not None:
            self.dispatch.clear()
        self.dispatch_timers.clear()
        self.plain_gemm.clear()
        self.repitch.clear()
        self.warned.clear()
        self.kernel_specialization.clear()


PROCESS = Process()
