"""Triton kernels: the shared GEMM core (``gemm_core``), one consumer kernel per fused op
(``ag_gemm``, ``gemm_rs``), the device-side flag protocol (``device_flags``, ``align``,
``split_wait``), the small calls' kernels (``one_shot``, ``push_rows``, ``gather_end``), the copy
between row pitches that pads operands to whole 16-byte rows (``repitch``), and their launcher
(``launch``)."""
