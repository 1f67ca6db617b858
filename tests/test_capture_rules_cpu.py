"""The capture rules of docs/cuda_graphs.md on CPU gloo ranks: the one predicate that says "a CUDA
graph is capturing" (``fluxlite.workspace.capturing``) is made to say yes, and each bad use must
raise its ``FluxliteError`` before anything is built or communicated, on every rank alike:

- a fused call before any eager one (no workspace to use);
- a shape or option that never ran eagerly (no plan);
- growth of a workspace that a graph has captured (eager or not).

A call with a warmed shape goes through, and marks the workspace as captured. On GPUs the same rules
are tested under real capture (tests/test_gpu_graphs.py).
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import fluxlite
from fluxlite import workspace

from .dist_utils import run_ranks


@contextlib.contextmanager
def _pretend_capture():
    real = workspace.capturing
    workspace.capturing = lambda device: True
    try:
        yield
    finally:
        workspace.capturing = real


def _rules(rank, W):
    gen = torch.Generator().manual_seed(rank)
    a, w = torch.randn(64, 32, generator=gen), torch.randn(48, 32, generator=gen)
    with _pretend_capture(), pytest.raises(fluxlite.FluxliteError, match="before its workspace exists"):
        fluxlite.ag_gemm(a, w, impl="fused")
    fluxlite.ag_gemm(a, w, impl="fused")  # the warm-up: workspace and plan
    ws = fluxlite.get_workspace()
    state = fluxlite.fused.state_of(ws)
    assert not state.captured
    for bad in (dict(a=a[:40]), dict(a=a, activation="gelu"), dict(a=a, return_gathered=True)):
        args = dict(bad)
        with _pretend_capture(), pytest.raises(fluxlite.FluxliteError, match="never ran eagerly"):
            fluxlite.ag_gemm(args.pop("a"), w, impl="fused", **args)
    with _pretend_capture():
        out = fluxlite.ag_gemm(a, w, impl="fused")  # a warmed shape: no error
    assert out.shape == (W * 64, 48) and state.captured
    capacity = ws.capacity
    big = torch.randn(ws.capacity // (32 * 4) + 1, 32)  # more rows than a data half holds
    with pytest.raises(fluxlite.FluxliteError, match="would replay into the freed buffers"):
        fluxlite.ag_gemm(big, w, impl="fused")  # eager, but a graph holds the buffers
    assert ws.capacity == capacity
    fluxlite.ag_gemm(a, w, impl="fused")  # the refusal poisoned nothing


def test_capture_rules_raise_before_anything_is_built():
    run_ranks(_rules, 2)
