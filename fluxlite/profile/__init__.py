"""fluxlite's profiler.

- ``fluxlite-profile`` (:mod:`fluxlite.profile.cli`): times every implementation of AG-GEMM and
  GEMM-RS per shape, with the overlap limit beside them, and reports the overlap (table, JSON, CSV, PNG).
- :mod:`fluxlite.profile.limit`: the overlap limit (the GEMM with the op's bytes copied beside it)
  and the efficiency of an implementation against it.
- :func:`layer_timings`: per-layer forward/backward times of a real model's fluxlite layers, with
  the sequential implementation sampled every few steps.

Calls are timed the one way fluxlite times collective calls, :mod:`fluxlite.timing`.
"""

from .layers import LayerTimings, layer_timings

__all__ = ["LayerTimings", "layer_timings"]
