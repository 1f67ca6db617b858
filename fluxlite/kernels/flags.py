"""Device-side flag protocol: a bounded acquire-wait on an epoch flag, and a release-signal.

Math of the protocol
--------------------
A flag slot holds the epoch of the last call that made its data ready. Call ``e`` waits for
``flag >= e``; it never resets a slot, so no barrier separates calls. A waiter gives up after
``timeout_ns`` (``%globaltimer`` on the GPU; a spin count under the Triton interpreter, which has no
inline PTX), records ``(code, slot, epoch, seen, peer, chunk, split)`` in the error record once
(first failure wins), and returns. Every later wait of the launch sees the record and returns at
once, so a missing peer costs one timeout, not one per tile. The host turns the record into
:class:`fluxlite.FluxliteTimeoutError`.

Ordering: the spinning load is an ``acquire`` at system scope (the data was written by another GPU's
copy engine or SMs), and a CTA barrier follows it so every thread's later loads come after it. A
signal is a CTA barrier (every thread's stores are done) followed by a ``release`` atomic at system
scope from one thread, which publishes all of them (cumulativity).
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import globaltimer

INTERPRET_SPIN_NS = tl.constexpr(200_000)
"""What one spin costs under the Triton interpreter (measured 150-250 us), to bound it in time."""


@triton.jit
def wait_epoch(
    flag_ptr,
    epoch,
    error_ptr,
    timeout_ns,
    code: tl.constexpr,
    slot,
    peer,
    chunk,
    split,
    INTERPRET: tl.constexpr,
):
    """Spin until ``*flag_ptr >= epoch`` (acquire, system scope), bounded by ``timeout_ns``.

    Returns the error code in force afterwards: 0 when the flag is ready.
    """
    seen = tl.atomic_add(flag_ptr, 0, sem="acquire", scope="sys")
    err = tl.atomic_add(error_ptr, 0, sem="relaxed", scope="gpu")
    if INTERPRET:
        start = tl.full((), 0, tl.int64)
    else:
        start = globaltimer()
    spins = tl.full((), 0, tl.int64)
    while (seen < epoch) & (err == 0):
        spins += 1
        if INTERPRET:
            elapsed = spins * INTERPRET_SPIN_NS
        else:
            elapsed = globaltimer() - start
        if elapsed > timeout_ns:
            if tl.atomic_cas(error_ptr, 0, code, sem="relaxed", scope="gpu") == 0:
                tl.store(error_ptr + 1, slot)
                tl.store(error_ptr + 2, epoch)
                tl.store(error_ptr + 3, seen)
                tl.store(error_ptr + 4, peer)
                tl.store(error_ptr + 5, chunk)
                tl.store(error_ptr + 6, split)
            err = tl.full((), code, tl.int32)
        else:
            seen = tl.atomic_add(flag_ptr, 0, sem="acquire", scope="sys")
            err = tl.atomic_add(error_ptr, 0, sem="relaxed", scope="gpu")
    tl.debug_barrier()
    return err


@triton.jit
def signal_add(counter_ptr, value):
    """Publish this CTA's prior stores, then add ``value`` to ``*counter_ptr``; returns the old value.

    ``acq_rel`` at system scope: the release publishes this CTA's stores, and the acquire lets the
    CTA that makes the count complete re-publish every other CTA's stores (cumulativity) with one
    more release, e.g. to a flag on another GPU.
    """
    tl.debug_barrier()
    return tl.atomic_add(counter_ptr, value, sem="acq_rel", scope="sys")


@triton.jit
def drain_tma_stores(INTERPRET: tl.constexpr):
    """Wait until this thread's TMA stores are written to global memory, not only read from shared.

    Triton waits for TMA stores with ``cp.async.bulk.wait_group.read``, which only frees the shared
    memory: the global writes may still be in flight. Before a signal publishes them they must be
    complete (``wait_group`` without ``.read``), and ordered before the generic-proxy release by a
    proxy fence.
    """
    if not INTERPRET:
        tl.inline_asm_elementwise(
            "cp.async.bulk.wait_group 0;\n\tfence.proxy.async.global;\n\tmov.u32 $0, 0;",
            "=r", [], dtype=tl.int32, is_pure=False, pack=1,
        )
