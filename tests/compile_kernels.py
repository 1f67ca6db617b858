"""Compile fluxlite's fused kernels for Hopper (sm_90) without a GPU: ``python tests/compile_kernels.py``.

The Triton interpreter accepts code that the compiler rejects (a non-constexpr global, a type that
does not unify across branches), so CI compiles every kernel variant for real, through Triton's
own backend and ptxas, and reports the shared memory each needs. Run by tests/test_kernels.py in a
subprocess, since the test session runs Triton in interpreter mode.
"""

from __future__ import annotations

import itertools
import os
import sys

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("run without TRITON_INTERPRET: this compiles for the GPU")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from fluxlite.kernels import ag_gemm, align, gemm_core, gemm_rs  # noqa: E402

SHARED_LIMIT = 232448  # bytes per block on H100/H200
INTS = ("num_tiles", "chunk_rows", "N", "K", "rank", "world_size", "sig_base", "claim_slot")


def compile_kernel(fn, types: dict, consts: dict, config: gemm_core.GemmConfig, num_warps: int | None = None):
    names = fn.arg_names
    signature = {n: types.get(n, "constexpr") for n in names}
    constexprs = {(names.index(k),): v for k, v in consts.items()}
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=num_warps or config.num_warps, num_stages=config.num_stages))


def variants(dtype: str, config: gemm_core.GemmConfig):
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    scalars = {n: "i32" for n in INTS} | {"timeout_ns": "i64", "scale": "fp32"}
    tables = {n: "*i32" for n in ("blocks_ptr", "tiles_ptr", "flags_ptr", "sig_ptr", "counters_ptr", "error_ptr", "call_ptr")}
    scales = dict(scale_local="*fp32", scale_gathered="*fp32")
    for use_tma, kmajor, bias in itertools.product((True, False), (False, True), (False, True)):
        def desc(shape):
            return f"tensordesc<{dtype}[{', '.join(map(str, shape))}]>" if use_tma else f"*{dtype}"
        consts = dict(HAS_BIAS=bias, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, B_KMAJOR=kmajor, USE_TMA=use_tma,
                      UPCAST=False, INTERPRET=False)
        b = desc([bk, bn] if kmajor else [bn, bk])
        tile = desc([1, bm, bn])
        name = f"tma={use_tma} kmajor={kmajor} bias={bias}"
        ag = dict(scalars, **tables, **scales, a_local=f"*{dtype}", gathered=f"*{dtype}", b_desc=b, out=tile,
                  bias_ptr=f"*{dtype}")
        yield f"ag_gemm {name}", ag_gemm.ag_gemm_kernel, ag, dict(consts, ROW_SCALED=False, ACTIVATION=0)
        rs = dict(scalars, **tables, a_desc=desc([bm, bk]), b_desc=b, out=tile, bias_ptr=f"*{dtype}", partial=tile,
                  recv=tile)
        yield f"gemm_rs {name}", gemm_rs.gemm_rs_kernel, rs, dict(consts, PEER_SLOTS=16)
        if kmajor or not bias:
            continue
        # The epilogue switches: every activation with a row scale (SwiGLU reads the gated weight).
        for act in range(1, 5):
            gated = act == 4
            ag_ep = dict(ag, b_desc=desc([2, bn // 2, bk]) if gated else b, out=desc([1, bm, bn // 2]) if gated else tile)
            yield (f"ag_gemm {name} row_scaled activation={act}", ag_gemm.ag_gemm_kernel, ag_ep,
                   dict(consts, ROW_SCALED=True, ACTIVATION=act))


def main() -> None:
    config = gemm_core.GemmConfig()
    failed = 0
    # Every variant in bf16; fp16 differs only in the element type, so its default variant suffices.
    cases = [("bf16", *v) for v in variants("bf16", config)] + [("fp16", *v) for v in list(variants("fp16", config))[:2]]
    cases.append(("int32", "align (parity alignment, W=8)", align.align_kernel,
                  dict(state_ptr="*i32", flag_bases_ptr="*i64", error_ptr="*i32", counters_ptr="*i32", sig_ptr="*i32",
                       parity="i32", rank="i32", world_size="i32", region="i32", num_counters="i32", sig_at="i32",
                       ready_at="i32", timeout_ns="i64"),
                  dict(REGION_BLOCK=512, COUNTERS_BLOCK=64, INTERPRET=False)))
    for dtype, name, fn, types, consts in cases:
        if True:
            try:
                kernel = compile_kernel(fn, types, consts, config, 1 if fn is align.align_kernel else None)
            except Exception as exc:  # report every variant that fails, then exit non-zero
                failed += 1
                print(f"FAIL {dtype} {name}: {type(exc).__name__}: {str(exc)[:2000]}", flush=True)
                continue
            shared = kernel.metadata.shared
            ok = shared <= SHARED_LIMIT
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {dtype} {name}: {shared} bytes of shared memory", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
