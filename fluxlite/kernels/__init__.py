"""Triton kernels: the shared GEMM core (``gemm_core``), one consumer kernel per fused op
(``ag_gemm``, ``gemm_rs``), and the device-side flag protocol (``flags``)."""
