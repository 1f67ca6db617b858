"""Test-session setup shared by every test module.

- Without CUDA, Triton kernels can only run in the interpreter, and interpret mode is fixed when
  ``@triton.jit`` runs: so ``TRITON_INTERPRET=1`` is set here, before any test module (and so any
  ``fluxlite.kernels`` module) is imported. Spawned ranks inherit it through the environment.
- Tests marked ``gpu`` are skipped cleanly when CUDA is absent (the marker is registered in
  pyproject.toml).
- Under pytest-xdist (the README's test command runs ``-n 2 --dist loadfile``) each module's tests
  run on one worker, so a module-scoped fixture runs once. Tests marked ``gpu`` are skipped on
  xdist's workers: two of them would hold the GPUs at once. Run them without ``-n`` (or through
  ``scripts/gpu_suite.sh tests``, one file at a time).
"""

from __future__ import annotations

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()

if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config: pytest.Config) -> None:
    # Registered here too, so that running a single test file outside the project root still knows it.
    config.addinivalue_line("markers", "gpu: needs CUDA GPUs (skipped cleanly without them)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not HAS_CUDA:
        reason = "needs CUDA: no GPU on this machine"
    elif os.environ.get("PYTEST_XDIST_WORKER"):
        reason = "GPU tests run one at a time: run them without -n (or scripts/gpu_suite.sh tests)"
    else:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
