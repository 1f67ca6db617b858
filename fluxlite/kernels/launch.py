"""Launch a Triton kernel through its compiled launcher, without Triton's per-call argument binding.

``fn[grid](*args, **constexprs)`` binds and specialises every argument on every call (about 0.1 ms
of host time for the fused kernels' ~25 arguments). The first call of each specialisation goes
that way and keeps the compiled kernel; later calls hand the same arguments straight to its
launcher. A call's specialisation key is computed here the way Triton computes it (a tensor's dtype
and 16-byte alignment; a host TMA descriptor's dtype, block shape, strides and alignment; an int's
width, and whether it equals 1 or is divisible by 16 unless it is in ``do_not_specialize``; a
float's type; a tuple's elements each so, always specialised), so a call that Triton would compile
differently never runs a kernel compiled for another. Tuples group pointers only (a kernel's
``sync`` and ``table``): an int in one would be specialised on its value whatever
``do_not_specialize`` says, and compile a kernel per row count.
"""

from __future__ import annotations

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from ..process import PROCESS
from .gemm_core import interpreting

_INT32 = (-(2**31), 2**31)


def _spec(arg, specialize: bool):
    if isinstance(arg, tuple):  # Triton specialises every element of a tuple, do_not_specialize or not
        return tuple(_spec(x, True) for x in arg)
    if isinstance(arg, torch.Tensor):
        return arg.dtype, arg.data_ptr() % 16 == 0
    if isinstance(arg, TensorDescriptor):
        return "desc", arg.base.dtype, tuple(arg.block_shape), arg.base.data_ptr() % 16 == 0, tuple(arg.strides)
    if isinstance(arg, int) and not isinstance(arg, bool):
        # Triton types an int i32 or i64 by its value, whether or not it specialises on it.
        wide = not _INT32[0] <= arg < _INT32[1]
        return (wide, arg == 1, arg % 16 == 0) if specialize else wide
    return type(arg)  # a float or bool: typed, never specialised on its value


def _specialized(fn, count: int) -> tuple[bool, ...]:
    """Per positional argument of ``fn``: whether Triton specialises on its value."""
    memo = PROCESS.kernel_specialization
    flags = memo.get(fn)
    if flags is None:
        skip, names = fn.do_not_specialize, fn.arg_names
        flags = memo[fn] = tuple(i not in skip and names[i] not in skip for i in range(len(names)))
    return flags[:count]


def _hook_set(hook) -> bool:
    # Triton >= 3.5 keeps an (empty) HookChain there when no hook is registered, always truthy.
    return bool(hook.calls) if hasattr(hook, "calls") else hook is not None


def _hooks_set() -> bool:
    """Whether a Triton launch hook (a profiler's) is registered: then launch through Triton."""
    runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
    return any(_hook_set(getattr(runtime, name, None)) for name in ("launch_enter_hook", "launch_exit_hook"))


REGISTERS_PER_SM = 65536
"""32-bit registers of an SM's register file (sm_80 to sm_90)."""


def max_registers(num_warps: int, programs_per_sm: int) -> int:
    """Registers per thread (a multiple of 8, the allocation's unit) at which ``programs_per_sm``
    programs of ``num_warps`` warps fit one SM."""
    return REGISTERS_PER_SM // (programs_per_sm * num_warps * 32) // 8 * 8


def _options(num_warps: int, num_stages: int, programs_per_sm: int | None) -> dict:
    """The compile options of a launch (:func:`launch`'s ``programs_per_sm`` as ``maxnreg``)."""
    options = dict(num_warps=num_warps, num_stages=num_stages)
    if programs_per_sm is not None and not interpreting():
        options["maxnreg"] = max_registers(num_warps, programs_per_sm)
    return options


def launch(fn, cache: dict, grid: int, args: tuple, constexprs: dict, *, num_warps: int, num_stages: int,
           programs_per_sm: int | None = None) -> None:
    """Launch ``fn`` on ``grid`` programs of the current stream with positional ``args`` (in the
    kernel's argument order) and keyword ``constexprs`` (the remaining arguments, in order).

    ``programs_per_sm``: compile ``fn`` with few enough registers per thread that so many of its
    programs fit an SM's register file together (:func:`max_registers`), for a kernel whose programs
    share out work round robin, where a program not yet resident would do its share last.
    ``cache`` keeps the compiled kernels of this caller (e.g. a call plan)."""
    if interpreting() or _hooks_set():
        fn[(grid,)](*args, **constexprs, **_options(num_warps, num_stages, programs_per_sm))
        return
    key = (tuple(map(_spec, args, _specialized(fn, len(args)))), tuple(constexprs.items()), num_warps, num_stages,
           programs_per_sm)
    kernel = cache.get(key)
    if kernel is None:
        names = fn.arg_names[len(args):]
        if list(constexprs) != list(names):
            raise TypeError(f"{fn.__name__}: constexprs must be {names} in order, got {list(constexprs)}")
        cache[key] = fn[(grid,)](*args, **constexprs, **_options(num_warps, num_stages, programs_per_sm))
        return
    stream = torch._C._cuda_getCurrentRawStream(torch.cuda.current_device())
    kernel.run(grid, 1, 1, stream, kernel.function, kernel.packed_metadata, None, None, None, *args,
               *constexprs.values())
