"""Device-side flag protocol: a bounded acquire-wait on a flag, the peer's call-signature check that
follows it, a release-signal, and the error record.

Math of the protocol
--------------------
A flag slot is set (``SET = 1``) by its one writer and cleared by its owner when its next call
starts (:mod:`fluxlite.schedule`); a waiter waits for ``flag >= 1``. The call's number is read from the
device's call count (``call_ptr``, which :mod:`fluxlite.kernels.align` advances before every call)
when a failure is recorded, not passed in: a kernel replayed from a CUDA graph then names the call it
runs as, not the call it was captured in. A waiter gives up ``timeout_ns`` after its first spin (``%globaltimer``
on the GPU, one reading per program: :func:`program_time`; a spin count under the Triton
interpreter, which has no inline PTX), records what it waited for in the error record once (first
failure wins), and returns. Once the flag is set, the waiter compares the peer's call signature
(written before the flag) with its own; a difference is recorded as :data:`ERR_MISMATCH`. Every
later wait of the launch, and of every later launch, sees the record and returns at once, so a
missing or disagreeing peer costs one timeout, not one per tile. The host turns the record into
:class:`fluxlite.FluxliteTimeoutError` or :class:`fluxlite.FluxliteCallMismatchError`.

Error record (int32 ``[RECORD_WORDS]``): ``code, slot, call, seen, peer, chunk, mirror (2 words)``,
then (mismatch only) the peer's ``SIG_WORDS`` signature words and this rank's. ``mirror`` (set by
the host; 0: none) is the device address of a copy of the record in host memory: the program that
writes the record copies it there, the code word last, so the host sees a failure without a copy in
every call's stream and without blocking (:meth:`fluxlite.fused.state.FusedState.check`).

Ordering: the spinning load is an ``acquire`` at system scope (the data was written by another GPU's
copy engine or SMs). Triton performs a scalar atomic in one thread and hands its result to the
others through shared memory behind a CTA barrier, and a CTA barrier follows the wait, so every
thread's later loads (and the TMA loads, which one thread issues) come after the acquire. A signal is a CTA barrier (every thread's stores
are done; for TMA stores, after they are drained) followed by a ``release`` atomic at system scope
from one thread, which publishes all of them (cumulativity).

Barriers here are :func:`cta_barrier`, a ``bar.sync`` in inline PTX, never ``tl.debug_barrier``:
Triton's software pipeliner leaves a loop unpipelined when its body holds a ``tl.debug_barrier``
(Triton 3.6-3.7), and the fused kernels' waits and signals sit inside their pipelined tile loops.
Every thread of a program takes the same branches around them (the values they branch on come
from scalar atomics, which every thread sees alike).
"""

import triton
import triton.language as tl

from .gemm_core import INTERPRET

ERR_TIMEOUT_AG = 1
"""An AG-GEMM row block timed out waiting for a peer's rows."""
ERR_TIMEOUT_RS = 2
"""A GEMM-RS row block timed out waiting for a peer's partials."""
ERR_MISMATCH = 4
"""A peer's call signature differs from this rank's."""
ERR_TIMEOUT_ALIGN = 8
"""A peer never arrived at a parity-alignment (null) call (:mod:`fluxlite.kernels.align`)."""
ERR_TIMEOUT_FINISHED = 16
"""A wait for a peer's ``reduced`` flag of a split timed out (:mod:`fluxlite.kernels.gather_end`):
the peer's reduced rows of a GEMM-AllReduce never landed."""
RECORD_WORDS = 16
MIRROR_WORD = 6
"""Words ``6`` (low) and ``7`` (high) of the record: its mirror's device address (int64)."""
# The same codes as constexprs, for use inside kernels (a kernel reads only constexpr globals).
TIMEOUT_AG = tl.constexpr(ERR_TIMEOUT_AG)
TIMEOUT_RS = tl.constexpr(ERR_TIMEOUT_RS)
MISMATCH = tl.constexpr(ERR_MISMATCH)
TIMEOUT_ALIGN = tl.constexpr(ERR_TIMEOUT_ALIGN)
TIMEOUT_FINISHED = tl.constexpr(ERR_TIMEOUT_FINISHED)
SIG_WORDS = tl.constexpr(4)  # fluxlite.schedule.SIG_WORDS
_RECORD_WORDS = tl.constexpr(RECORD_WORDS)
_MIRROR = tl.constexpr(MIRROR_WORD)

INTERPRET_SPIN_NS = tl.constexpr(200_000)
"""What one spin costs under the Triton interpreter (measured 150-250 us), to bound it in time."""
_CAP_NS = tl.constexpr(2**62 - 1)
ARRIVED_GRACE = tl.constexpr(8)
"""A wait for an arrived peer's data is bounded at ``timeout_ns * (1 + 1 / ARRIVED_GRACE)``
(:func:`wait_peer`)."""
TIMER_LANES = tl.constexpr(1024)  # >= the threads of any launch (32 warps): each thread reads the timer


@triton.jit
def cta_barrier():
    """A barrier of the program's threads (``bar.sync 0``) that Triton's pipeliner does not see (module
    docstring). Under the interpreter, whose programs are one thread, nothing."""
    if not INTERPRET:
        tl.inline_asm_elementwise("bar.sync 0;\n\tmov.u32 $0, 0;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def program_time():
    """``%globaltimer`` as one value for the whole program (the max over its threads' readings).

    Each thread reads the timer itself, and readings differ across a tick. The scalar atomics of the
    wait loop synchronise the program's threads (one thread performs them and shares the result), so
    threads that disagreed about a timeout would take different branches around those barriers and
    the program hangs. Measured on 2 ranks sharing an H100 (layer backward, peer missing): with each
    thread's own reading, 8 of 20 runs left the AG kernel running forever after its timeout, every
    tile claimed and the failure recorded; with this, 0 of 10.
    """
    readings = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,l", [tl.zeros([TIMER_LANES], tl.int64)],
                                         dtype=tl.int64, is_pure=False, pack=1)
    return tl.max(readings, axis=0)


@triton.jit
def _record(error_ptr, code, slot, call_ptr, seen, peer, chunk):
    """Write the error record unless an earlier failure already did (first failure wins); the call
    is named by the device's call count at ``call_ptr``. Returns 1 when this call wrote it."""
    won = tl.atomic_cas(error_ptr, 0, code, sem="relaxed", scope="gpu") == 0
    if won:
        tl.store(error_ptr + 1, slot)
        tl.store(error_ptr + 2, tl.load(call_ptr, volatile=True))
        tl.store(error_ptr + 3, seen)
        tl.store(error_ptr + 4, peer)
        tl.store(error_ptr + 5, chunk)
    return won.to(tl.int32)


@triton.jit
def _publish(error_ptr):
    """Copy the record (this program wrote it) to its mirror in host memory, if it has one: the other
    words first, then, after a CTA barrier and a system-scope fence, the code word, so a host that
    reads a non-zero code reads the whole record."""
    cta_barrier()  # every thread's record stores, before any thread reads the record back
    lo = tl.load(error_ptr + _MIRROR).to(tl.uint32).to(tl.int64)
    hi = tl.load(error_ptr + _MIRROR + 1).to(tl.int64)
    address = lo | (hi << 32)
    if address != 0:
        mirror = address.to(tl.pointer_type(tl.int32))
        offs = tl.arange(0, _RECORD_WORDS)
        tl.store(mirror + offs, tl.load(error_ptr + offs, volatile=True), mask=offs > 0)
        cta_barrier()
        if not INTERPRET:
            tl.inline_asm_elementwise("fence.sc.sys;\n\tmov.u32 $0, 0;", "=r", [], dtype=tl.int32, is_pure=False,
                                      pack=1)
        tl.store(mirror, tl.load(error_ptr, volatile=True))


@triton.jit
def wait_set(flag_ptr, call_ptr, error_ptr, timeout_ns, code, slot, peer, chunk):
    """Spin until ``*flag_ptr`` is set (``>= 1``; acquire, system scope), bounded by ``timeout_ns``.

    Returns the error code in force afterwards: 0 when the flag is set.
    """
    seen = tl.atomic_add(flag_ptr, 0, sem="acquire", scope="sys")
    err = tl.atomic_add(error_ptr, 0, sem="relaxed", scope="gpu")
    # The clock starts at the first spin, not before the first look: a flag that is already set
    # (most waits of a call) costs no timer reduction.
    start = tl.full((), 0, tl.int64)
    spins = tl.full((), 0, tl.int64)
    while (seen < 1) & (err == 0):
        spins += 1
        if INTERPRET:
            elapsed = spins * INTERPRET_SPIN_NS
        else:
            now = program_time()
            if spins == 1:
                start = now
            elapsed = now - start
        if elapsed > timeout_ns:
            if _record(error_ptr, code, slot, call_ptr, seen, peer, chunk) == 1:
                _publish(error_ptr)
            err = tl.full((), code, tl.int32)
        else:
            seen = tl.atomic_add(flag_ptr, 0, sem="acquire", scope="sys")
            err = tl.atomic_add(error_ptr, 0, sem="relaxed", scope="gpu")
    cta_barrier()  # no thread runs ahead of the others' last look at the flag
    return err


@triton.jit
def longer(timeout_ns, divisor: tl.constexpr):
    """``timeout_ns * (1 + 1 / divisor)`` in 64 bits, of a timeout taken as at most ``2**62 - 1`` ns
    (146 years): Triton types a timeout under 2.15 s as int32, and the largest timeout fluxlite
    takes (9.2e18 ns) fills an int64."""
    t = tl.minimum(timeout_ns.to(tl.int64), _CAP_NS)
    return t + t // divisor


@triton.jit
def wait_peer(sync, slot, sig_base, timeout_ns, code, peer, chunk):
    """Wait for ``peer``'s data behind flag ``slot`` of the call's flag region, bounded. ``sync`` is
    the call's ``(flags, signature, error record, call count)`` pointers (:func:`sync_args`):

    1. ``peer``'s ready flag (slot ``peer``, schedule.ready_slot): it has written its signature here;
    2. its signature (at ``flags[sig_base + peer * SIG_WORDS]``) equals ours;
    3. the data flag ``slot``, bounded at an eighth more than ``timeout_ns``
       (:data:`ARRIVED_GRACE`).

    Checking the signature before the data flag means a peer in another call is reported at once,
    whichever flags that call sets. Why the grace: once a peer has arrived, its data can still queue
    behind a peer that has not (at three or more ranks, AG-GEMM's pull of an arrived peer's rows
    waits in our producer's program behind the pull of a missing peer's). Programs of one kernel wait
    on both at once, and the longer bound makes the wait on the missing peer's arrival the one
    recorded. Returns the error code in force: 0 when the data may be used.
    """
    flags_ptr, sig_ptr, error_ptr, call_ptr = sync[0], sync[1], sync[2], sync[3]
    err = wait_set(flags_ptr + peer, call_ptr, error_ptr, timeout_ns, code, peer, peer, chunk)
    if err == 0:
        theirs = flags_ptr + sig_base + peer * SIG_WORDS
        differ = tl.full((), 0, tl.int32)
        for w in tl.static_range(SIG_WORDS):
            differ |= (tl.load(theirs + w, volatile=True) != tl.load(sig_ptr + w)).to(tl.int32)
        if differ != 0:
            if _record(error_ptr, MISMATCH, slot, call_ptr, 0, peer, chunk) == 1:
                for w in tl.static_range(SIG_WORDS):
                    tl.store(error_ptr + 8 + w, tl.load(theirs + w, volatile=True))
                    tl.store(error_ptr + 8 + SIG_WORDS + w, tl.load(sig_ptr + w))
                _publish(error_ptr)
            err = tl.full((), MISMATCH, tl.int32)
    if err == 0:
        err = wait_set(flags_ptr + slot, call_ptr, error_ptr, longer(timeout_ns, ARRIVED_GRACE), code, slot, peer,
                       chunk)
    return err


@triton.jit
def release_flags(flags_ptr, first, world_size):
    """Set the ``world_size`` flags from slot ``first`` on (relaxed: no data goes with them). A kernel
    whose wait failed calls it for the flags its producer's stream waits on after the kernel (AG
    pull's ``ready`` slots), which a missing peer never sets, so the stream drains and the host can
    raise instead of hanging."""
    for q in range(0, world_size):
        tl.atomic_max(flags_ptr + first + q, 1, sem="relaxed", scope="sys")


@triton.jit
def signal_add(counter_ptr, value):
    """Publish this CTA's prior stores, then add ``value`` to ``*counter_ptr``; returns the old value.

    ``acq_rel`` at system scope: the release publishes this CTA's stores, and the acquire lets the
    CTA that makes the count complete re-publish every other CTA's stores (cumulativity) with one
    more release, e.g. to a flag on another GPU.
    """
    cta_barrier()
    return tl.atomic_add(counter_ptr, value, sem="acq_rel", scope="sys")


@triton.jit
def drain_tma_stores():
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


def sync_args(flags, sig, error, call) -> tuple:
    """The ``sync`` argument of the kernels that wait on peers (:func:`wait_peer`): the call's flag
    region, its signature ``[SIG_WORDS]``, the error record and the device's call count, as one
    tuple of int32 tensors (Triton passes it as four pointers)."""
    return flags, sig, error, call
