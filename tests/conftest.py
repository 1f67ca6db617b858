"""Test-session setup shared by every test module.

- Without CUDA, Triton kernels can only run in the interpreter, and interpret mode is fixed when
  ``@triton.jit`` runs: so ``TRITON_INTERPRET=1`` is set here, before any test module (and so any
  ``fluxlite.kernels`` module) is imported. Spawned ranks inherit it through the environment.
- Tests marked ``gpu`` are skipped cleanly when CUDA is absent (the marker is registered in
  pyproject.toml).
- Under pytest-xdist (the README's test command runs ``-n 2 --dist loadgroup``), each module's tests
  run on one worker, so a module-scoped fixture runs once, and every ``gpu`` test on the same worker,
  so two tests never hold the GPUs at once.
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
    config.addinivalue_line("markers", "xdist_group(name): tests pytest-xdist's loadgroup keeps on one worker")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.xdist_group("gpu" if "gpu" in item.keywords else item.nodeid.split("::")[0]))
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs CUDA: no GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
