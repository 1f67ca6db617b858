"""Launch a Triton kernel through its compiled launcher, without Triton's per-call argument binding.

``fn[grid](*args, **constexprs)`` binds and specialises every argument on every call (about 0.1 ms
of host time for the fused kernels' ~25 arguments). The first call of each specialisation goes
that way and keeps the compiled kernel; later calls hand the same arguments straight to its
launcher. A call's specialisation key is computed here the way Triton computes it (pointer
alignment, integers equal to 1 or divisible by 16, descriptor block shapes), so a call that Triton
would compile differently never runs a kernel compiled for another.
"""

from __future__ import annotations

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from .gemm_core import interpreting


def _spec(arg, specialize: bool):
    if isinstance(arg, torch.Tensor):
        return arg.dtype, arg.data_ptr() % 16 == 0
    if isinstance(arg, TensorDescriptor):
        return "desc", arg.base.dtype, tuple(arg.block_shape), arg.base.data_ptr() % 16 == 0, tuple(arg.strides)
    if isinstance(arg, bool) or not isinstance(arg, int):
        return type(arg), arg
    return (arg == 1, arg % 16 == 0) if specialize else int


def _hook_set(hook) -> bool:
    # Triton >= 3.5 keeps an (empty) HookChain there when no hook is registered, always truthy.
    return bool(hook.calls) if hasattr(hook, "calls") else hook is not None


def _hooks_set() -> bool:
    """Whether a Triton launch hook (a profiler's) is registered: then launch through Triton."""
    runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
    return any(_hook_set(getattr(runtime, name, None)) for name in ("launch_enter_hook", "launch_exit_hook"))


def launch(fn, cache: dict, grid: int, args: tuple, constexprs: dict, *, num_warps: int, num_stages: int) -> None:
    """Launch ``fn`` on ``grid`` programs of the current stream with positional ``args`` (in the
    kernel's argument order) and keyword ``constexprs`` (the remaining arguments, in order).

    ``cache`` keeps the compiled kernels of this caller (e.g. a call plan)."""
    if interpreting() or _hooks_set():
        fn[(grid,)](*args, **constexprs, num_warps=num_warps, num_stages=num_stages)
        return
    skip = fn.do_not_specialize
    names = fn.arg_names
    key = (tuple(_spec(a, i not in skip and names[i] not in skip) for i, a in enumerate(args)),
           tuple(constexprs.items()), num_warps, num_stages)
    kernel = cache.get(key)
    if kernel is None:
        if list(constexprs) != list(names[len(args):]):
            raise TypeError(f"{fn.__name__}: constexprs must be {names[len(args):]} in order, got {list(constexprs)}")
        cache[key] = fn[(grid,)](*args, **constexprs, num_warps=num_warps, num_stages=num_stages)
        return
    stream = torch._C._cuda_getCurrentRawStream(torch.cuda.current_device())
    kernel.run(grid, 1, 1, stream, kernel.function, kernel.packed_metadata, None, None, None, *args,
               *constexprs.values())
