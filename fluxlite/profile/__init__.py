"""fluxlite's profiler: ``fluxlite-profile`` (:mod:`fluxlite.profile.cli`) times each implementation
of AG-GEMM and GEMM-RS per shape and reports the overlap; :mod:`fluxlite.profile.timing` is the
one way fluxlite times collective calls (the profiler, the measured dispatch, the benchmarks)."""
