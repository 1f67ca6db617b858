"""fluxlite's profiler.

- ``fluxlite-profile`` (:mod:`fluxlite.profile.cli`): times every implementation of AG-GEMM and
  GEMM-RS per shape and reports the overlap (table, JSON, CSV, PNG).
- :func:`layer_timings`: per-layer forward/backward times of a real model's fluxlite layers, with
  the sequential implementation sampled every few steps.
- :mod:`fluxlite.profile.timing`: the one way fluxlite times collective calls (the profiler, the
  measured dispatch, the benchmarks).
"""

from .layers import LayerTimings, layer_timings

__all__ = ["LayerTimings", "layer_timings"]
