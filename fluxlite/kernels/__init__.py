"""Triton kernels, one concern per file: ``flags`` (bounded epoch waits and signals) and
``fused_gemm`` (the persistent GEMM that waits on or signals them)."""
