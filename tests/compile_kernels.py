"""Compile fluxlite's fused kernels for Hopper (sm_90) without a GPU: ``python tests/compile_kernels.py``.

The Triton interpreter accepts code that the compiler rejects (a non-constexpr global, a type that
does not unify across branches), so CI compiles every kernel variant for real, through Triton's
own backend and ptxas, and reports the shared memory each needs. Run by tests/test_kernels.py in a
subprocess, since the test session runs Triton in interpreter mode.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import struct
import sys

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("run without TRITON_INTERPRET: this compiles for the GPU")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from fluxlite.kernels import (ag_gemm, align, gather_end, gemm_core, gemm_rs, launch, one_shot, push_rows,  # noqa: E402
                              repitch, split_wait)

SHARED_LIMIT = 232448  # bytes per block on H100/H200
EIATTR_REGCOUNT = 0x2F  # a cubin's .nv.info attributes: (function's symbol, registers per thread)
EIATTR_FRAME_SIZE = 0x11  # (function's symbol, bytes of local memory per thread: spilled registers)
AG_INTS = ("num_tiles", "local_tiles", "chunk_rows", "N", "K", "world_size", "sig_base")
RS_INTS = ("peer_tiles", "num_tiles", "chunk_rows", "a_rows", "N", "K", "rank", "world_size", "sig_base", "claim_slot",
           "reduced_counters")
ONE_SHOT_INTS = ("M", "N", "rank", "world_size", "chunk", "sig_base", "finished_at", "signal_at", "claim_slot")
TMA_STORE = "async_tma_copy_local_to_global"


def compile_kernel(fn, types: dict, consts: dict, config: gemm_core.GemmConfig, num_warps: int | None = None,
                   programs_per_sm: int | None = None):
    """Compile ``fn`` for sm_90. ``types``: the runtime arguments' types, ``(type, 16)`` for one whose
    value or address divides by 16 (as Triton specialises a launch on it), a list of types for a tuple
    argument; ``consts``: the constexprs (an argument given as ``None`` is a constexpr ``None``);
    ``programs_per_sm``: as :func:`fluxlite.kernels.launch.launch` takes it."""
    names = fn.arg_names

    def typed(t):
        return tuple(t) if isinstance(t, list) else t[0] if isinstance(t, tuple) else t

    signature = {n: typed(types.get(n, "constexpr")) for n in names}
    constexprs = {(names.index(k),): v for k, v in consts.items()}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n, t in types.items() if isinstance(t, tuple)}
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    options = dict(num_warps=num_warps or config.num_warps, num_stages=config.num_stages)
    if programs_per_sm is not None:
        options["maxnreg"] = launch.max_registers(options["num_warps"], programs_per_sm)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def function_attributes(cubin: bytes) -> dict[int, int]:
    """The per-function attributes of the one function in ``cubin`` (an ELF64 file) that its
    ``.nv.info`` section holds as (symbol, value) pairs: :data:`EIATTR_REGCOUNT` and
    :data:`EIATTR_FRAME_SIZE` among them (what ``ptxas -v`` prints as "Used N registers" and "N bytes
    stack frame")."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    entsize, count, names_at = struct.unpack_from("<HHH", cubin, 0x3A)
    # Elf64_Shdr: name, type, flags, addr, offset, size, link, info, addralign, entsize
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * entsize) for i in range(count)]
    names = sections[names_at][4]
    found = {}
    for sec in sections:
        if cubin[names + sec[0]:cubin.index(0, names + sec[0])] != b".nv.info":
            continue
        info, at = cubin[sec[4]:sec[4] + sec[5]], 0
        while at + 4 <= len(info):  # entries: format, attribute, then a u16 value or a u16 size and that many bytes
            fmt, attr, size = info[at], info[at + 1], struct.unpack_from("<H", info, at + 2)[0]
            if fmt == 4 and size == 8:
                found[attr] = struct.unpack_from("<II", info, at + 4)[1]
            at += 4 + size if fmt == 4 else 4 if fmt in (2, 3) else 2
    return found


def pipelined_tile_loops(ttgir: str) -> int:
    """Loops of the compiled kernel (TTGIR) that hold both the matrix instructions and a tile's TMA
    store (TMA or pointer), and whose matrix instruction overlaps the next one (a wait that leaves one in flight): tile
    loops whose K loop the compiler fused into them (``tl.range(flatten=...)``) and then
    software-pipelined. A tile loop that was not flattened keeps its K loop, without the store, as a
    loop of its own; a fused loop that the pipeliner left alone waits for each matrix instruction
    to finish before the next K step's loads."""
    lines = ttgir.splitlines()
    found = 0
    for i, line in enumerate(lines):
        if "scf.for" not in line:
            continue
        indent = len(line) - len(line.lstrip())
        body = []
        for later in lines[i + 1:]:
            if later.strip().startswith("}") and len(later) - len(later.lstrip()) == indent:
                break
            body.append(later)
        text = "\n".join(body)
        overlapped = any("warp_group_dot_wait" in b and "pendings = 1 " in b for b in body)
        stores = TMA_STORE in text or "tt.store" in text
        if "warp_group_dot " in text and stores and "scf.for" not in text and overlapped:
            found += 1
    return found


def variants(dtype: str, config: gemm_core.GemmConfig):
    """``(name, kernel, types, constexprs, pipelined tile loops expected)`` for every variant."""
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    # the schedule's (blocks, tiles), the call's (flags, signature, error record, call count), RS's counters
    tables = dict(table=["*i32"] * 2, sync=["*i32"] * 4, counters_ptr="*i32")
    scalars = dict(timeout_ns="i64", scale="fp32")
    # (operands by TMA, outputs by TMA): outputs of unaligned rows (N % 8 != 0) are stored by pointer
    # while the operands keep TMA.
    tma_modes = ((True, True), (True, False), (False, False))
    for (use_tma, rows_tma), kmajor, bias in itertools.product(tma_modes, (False, True), (False, True)):
        if use_tma and not rows_tma and kmajor:
            continue  # pointer stores: the weight's layout changes nothing of them
        def desc(shape, tma=use_tma):
            return f"tensordesc<{dtype}[{', '.join(map(str, shape))}]>" if tma else f"*{dtype}"
        consts = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, B_KMAJOR=kmajor)
        none = {} if bias else dict(bias_ptr=None)
        b = desc([bk, bn] if kmajor else [bn, bk])
        half = desc([1, bm, bn // 2], rows_tma)
        loops = 1 if use_tma else 0  # AG's local loop (the peers' keeps a K pipeline per tile)
        name = f"tma={use_tma} rows_tma={rows_tma} kmajor={kmajor} bias={bias}"
        ag = dict(scalars, **tables, **{n: "i32" for n in AG_INTS}, a_local=desc([bm, bk]), gathered=desc([bm, bk]),
                  b_desc=b, out=half, bias_ptr=f"*{dtype}")
        ag_consts = dict(consts, **none, scale_local=None, scale_gathered=None, ACTIVATION=0)
        yield f"ag_gemm {name}", ag_gemm.ag_gemm_kernel, ag, ag_consts, loops
        rs = dict(scalars, **tables, **{n: "i32" for n in RS_INTS}, a_desc=desc([bm, bk]), b_desc=b, out=half,
                  bias_ptr=f"*{dtype}", partial=half, recv=half)
        # GEMM-RS's peer runs and local runs, each fused with the K loop (fluxlite/kernels/gemm_rs.py)
        yield f"gemm_rs {name}", gemm_rs.gemm_rs_kernel, rs, dict(consts, **none, PEER_SLOTS=16), 2 * loops
        if not use_tma and not kmajor:
            # The one-shot reduction of GEMM-AllReduce and small GEMM-RS (no GEMM, no TMA): ``out`` and the bias 16-byte aligned
            # with a bias, and not aligned without one. The partials' loads are vectors either way: the
            # kernel reads the run of M * N elements in whole tiles, whatever N is.
            reduce_args = dict(scalars, sync=["*i32"] * 4, counters_ptr="*i32",
                               **{n: "i32" for n in ONE_SHOT_INTS}, partials_ptr="*i64", flag_bases_ptr="*i64",
                               first=("i32", 16),  # specialised: a multiple of 16 elements (0: GEMM-AllReduce)
                               out=f"*{dtype}", bias_ptr=f"*{dtype}")
            if bias:
                reduce_args.update(out=(f"*{dtype}", 16), bias_ptr=(f"*{dtype}", 16))
            yield (f"one-shot reduction aligned={bias} bias={bias}", one_shot.one_shot_kernel, reduce_args,
                   dict(none, BLOCK=one_shot.BLOCK), 0)
        if kmajor or not bias:
            continue
        # The epilogue switches: every activation with a row scale (SwiGLU reads the gated weight).
        for act in range(1, 5) if rows_tma == use_tma else (4,):  # pointer stores: SwiGLU's half-width tile
            gated = act == 4
            ag_ep = dict(ag, b_desc=desc([2, bn // 2, bk]) if gated else b,
                         out=desc([1, bm, bn // 4], rows_tma) if gated else half, scale_local="*fp32", scale_gathered="*fp32")
            yield (f"ag_gemm {name} row_scaled activation={act}", ag_gemm.ag_gemm_kernel, ag_ep,
                   dict(consts, ACTIVATION=act), loops)


def main() -> None:
    config = gemm_core.GemmConfig()
    failed = 0
    # Every variant in bf16; fp16 differs only in the element type, so its default variant suffices.
    cases = [("bf16", *v) for v in variants("bf16", config)] + [("fp16", *v) for v in list(variants("fp16", config))[:2]]
    cases.append(("int32", "align (parity alignment, W=8)", align.align_kernel,
                  dict(state_ptr="*i32", flag_bases_ptr="*i64", error_ptr="*i32", counters_ptr="*i32", sig_ptr="*i32",
                       parity="i32", rank="i32", world_size="i32", region="i32", num_counters="i32", sig_at="i32",
                       ready_at="i32", timeout_ns="i64"),
                  dict(REGION_BLOCK=512, COUNTERS_BLOCK=256), 0))
    for crop in (False, True):  # the crop: gathered's rows padded, out's (N) off 16 bytes
        aligned = ("i32", 16) if not crop else "i32"
        cases.append(("bf16", "gather_end (the peers' chunks in, split by split"
                      + (", every chunk's first N columns)" if crop else ")"), gather_end.gather_end_kernel,
                      dict(out=("*bf16", 16), data_bases_ptr=("*i64", 16), flag_bases_ptr=("*i64", 16),
                           bounds_ptr=("*i32", 16), error_ptr="*i32", call_ptr="*i32", rank="i32", world_size="i32",
                           splits="i32", gathered=("i32", 16), chunk=aligned, N=aligned, total="i32",
                           pitch="i32", region="i32", reduced_at="i32", timeout_ns="i64"),
                      dict(BLOCK=gather_end.BLOCK, CROP=crop), 0))
    cases.append(("int32", "push_rows (AG-GEMM's small chunk gathered by the SMs, the call's alignment too, W=8)",
                  push_rows.push_rows_kernel,
                  dict(src="i64", data_bases_ptr=("*i64", 16), flag_bases_ptr=("*i64", 16), count_ptr="*i32",
                       state_ptr="*i32", error_ptr="*i32", counters_ptr="*i32", sig_ptr="*i32", dst_offset16="i32",
                       words16="i32", rank="i32", to_self="i32", world_size="i32", parity="i32", region="i32",
                       num_counters="i32", sig_at="i32", ready_at="i32", sig_base="i32", first_slot="i32",
                       peer_stride="i32", splits="i32", wait="i32", timeout_ns="i64"),
                  dict(BLOCK=push_rows.BLOCK, REGION_BLOCK=512, COUNTERS_BLOCK=256), 0))
    cases.append(("int32", "split_wait (the matmul consumer's bounded wait)", split_wait.split_wait_kernel,
                  dict(sync=["*i32"] * 4, first="i32", peer_stride="i32", peer_lo="i32", peer_hi="i32", rank="i32",
                       chunk="i32", sig_base="i32", timeout_ns="i64", code="i32"), {}, 0))
    for dtype, bits in (("bf16", 16), ("fp16", 16), ("fp32", 32)):  # the copies between row pitches
        for words, unit in ((True, 1), (False, 128 // bits)):
            block_r, block_c = repitch.WORD_TILE if words else repitch.ELEMENT_TILE
            cases.append((dtype, f"repitch ({'a pad: by words' if words else 'a crop: by elements'})",
                          repitch.repitch_kernel,
                          dict(src=(f"*{dtype}", 16), dst=(f"*{dtype}", 16), rows="i32", cols="i32", src_pitch="i32",
                               dst_rows="i32", dst_cols="i32", col_tiles="i32"),
                          dict(BITS=bits, WORDS=words, SRC_UNIT=unit, BLOCK_R=block_r, BLOCK_C=block_c), 0))
    # launched as one program of one warp
    one_warp = (align.align_kernel, split_wait.split_wait_kernel)
    # launched with warps of their own and one stage
    gather = {gather_end.gather_end_kernel: gather_end.NUM_WARPS, push_rows.push_rows_kernel: push_rows.NUM_WARPS,
              repitch.repitch_kernel: repitch.NUM_WARPS}
    # the two launched PROGRAMS_PER_SM to an SM, round robin (fluxlite.kernels.launch.max_registers)
    programs_per_sm = {one_shot.one_shot_kernel: one_shot.PROGRAMS_PER_SM,
                       gather_end.gather_end_kernel: gather_end.PROGRAMS_PER_SM}
    for dtype, name, fn, types, consts, loops in cases:
        if True:
            try:
                warps = 1 if fn in one_warp else one_shot.NUM_WARPS if fn is one_shot.one_shot_kernel else gather.get(fn)
                # the one-shot reduction and the gather's end launch with one stage
                one_stage = fn is one_shot.one_shot_kernel or fn in gather
                stages = dataclasses.replace(config, num_stages=1) if one_stage else config
                per_sm = programs_per_sm.get(fn)
                kernel = compile_kernel(fn, types, consts, stages, warps, per_sm)
            except Exception as exc:  # report every variant that fails, then exit non-zero
                failed += 1
                print(f"FAIL {dtype} {name}: {type(exc).__name__}: {str(exc)[-3000:]}", flush=True)
                continue
            shared = kernel.metadata.shared
            pipelined = pipelined_tile_loops(kernel.asm["ttgir"])
            # the one-shot reduction streams the partials: 16-byte loads at any N; the gather's end copies
            # rows in 16-byte vectors where its runs start on a multiple of 16 elements
            ptx = kernel.asm["ptx"]
            vector = ("ld.global.cg.v4" in ptx if fn is one_shot.one_shot_kernel
                      else "ld.global.cg.v4" in ptx if "first N columns" in name
                      else "ld.global.cg.v4" in ptx and "st.global.v4" in ptx if fn is gather_end.gather_end_kernel
                      else "ld.global.cg.v4" in ptx and "st.global.v4" in ptx if fn is push_rows.push_rows_kernel
                      # the copies between pitches: on the word path no access narrower than a word; on
                      # the element path (an aligned source) 16-byte loads
                      else not re.search(r"(ld|st)\.global\.b(8|16)\b", ptx) if "by words" in name
                      else "ld.global.v4" in ptx if fn is repitch.repitch_kernel
                      else None)
            vector_ok = vector is None or vector
            # A kernel that shares out its work round robin over several programs per SM needs them all
            # resident: one that is not runs its share after the others have finished theirs.
            attrs = function_attributes(kernel.asm["cubin"])
            regs, frame, per_sm = attrs.get(EIATTR_REGCOUNT, 0), attrs.get(EIATTR_FRAME_SIZE, 0), per_sm or 1
            resident = launch.REGISTERS_PER_SM // max(1, -(-regs // 8) * 8 * 32 * kernel.metadata.num_warps)
            # and capped registers must not spill: a copy that went through local memory would be slower
            ok = (shared <= SHARED_LIMIT and pipelined >= loops and vector_ok and 0 < regs and per_sm <= resident
                  and not (per_sm > 1 and frame))
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {dtype} {name}: {shared} bytes of shared memory, {regs} registers, "
                  f"{frame} bytes of stack frame "
                  f"({resident} programs per SM, {per_sm} launched), {pipelined} pipelined tile loops "
                  f"(expected {loops})" + ("" if vector is None else f", vector loads {vector}"), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
