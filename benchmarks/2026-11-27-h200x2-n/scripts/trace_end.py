"""Kineto chrome traces of 10 queued fused gemm_ar calls per shape (SH=MxKxN,...), both ranks, into
$R/tr_<TAG>_<M>x<K>x<N>.<rank>.json: ../../2026-11-27-h200x2-m/scripts/trace32.py (run from the
checkout's root, no SPLIT_WEIGHTS), with the end kernel's knobs from PUSH_SHARE
(gather_end.PUSHER_SHARE), GBLOCK (gather_end.BLOCK) and PPS (kernels.gemm_ar.PROGRAMS_PER_SM) where
set. Summaries: end_times.py."""
import os
import runpy
import sys

sys.path.append(os.getcwd())
import fluxlite  # noqa: E402,F401  (the modules the knobs live in)

KNOBS = {"PUSH_SHARE": ("fluxlite.kernels.gather_end", "PUSHER_SHARE"),
         "GBLOCK": ("fluxlite.kernels.gather_end", "BLOCK"),
         "PPS": ("fluxlite.kernels.gemm_ar", "PROGRAMS_PER_SM")}
for env, (module, name) in KNOBS.items():
    if os.environ.get(env):
        setattr(sys.modules[module], name, int(os.environ[env]))
runpy.run_path("benchmarks/2026-11-27-h200x2-m/scripts/trace32.py", run_name="__main__")
