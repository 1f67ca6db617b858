"""The core never imports the profiler: no module under fluxlite/ outside fluxlite/profile/ imports
``fluxlite.profile`` (the profiler builds on the core, never the other way round), read from the
source, and seen in ranks in fresh interpreters that import every core module and measure an
``auto`` call."""

from __future__ import annotations

import ast
import importlib
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .dist_utils import free_port

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fluxlite"


def _core_modules() -> dict[str, Path]:
    """``{dotted name: path}`` of every module of the package outside fluxlite/profile/."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        if rel.parts[1:2] == ("profile",):
            continue
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = path
    return out


def _imported(module: str, path: Path) -> set[str]:
    """The absolute names of the modules ``path`` imports (relative imports resolved; for
    ``from X import name`` both ``X`` and ``X.name``, since ``name`` may be a submodule)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return names


def _is_profile(name: str) -> bool:
    return name == "fluxlite.profile" or name.startswith("fluxlite.profile.")


def test_no_core_module_imports_the_profiler_in_its_source():
    modules = _core_modules()
    assert {"fluxlite", "fluxlite.dispatch", "fluxlite.timing", "fluxlite.parallel.layers"} <= set(modules)
    offenders = {m: sorted(filter(_is_profile, _imported(m, p))) for m, p in modules.items()}
    assert not {m: names for m, names in offenders.items() if names}, offenders


def test_the_resolver_sees_relative_imports_of_the_profiler(tmp_path):
    """The check above can fail: a relative import of the profiler from a core module is found."""
    probe = tmp_path / "fluxlite" / "probe.py"
    probe.parent.mkdir()
    probe.write_text("from .profile import run\nfrom . import profile\n")
    assert {"fluxlite.profile", "fluxlite.profile.run"} <= _imported("fluxlite.probe", probe)


def _fresh_rank(rank: int, W: int, port: int, cache_dir: str) -> None:
    """One rank in a fresh interpreter: import every core module, measure an ``auto`` call, look."""
    os.environ.update(FLUXLITE_AUTO="measure", FLUXLITE_CACHE_DIR=cache_dir, FLUXLITE_TIMEOUT_S="20")
    assert not [m for m in sys.modules if m.startswith("fluxlite")], "the interpreter was not fresh"
    for name in _core_modules():
        importlib.import_module(name)
    import fluxlite
    from fluxlite import dispatch

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=W)
    try:
        gen = torch.Generator().manual_seed(rank)
        a, w = torch.randn(3, 8, generator=gen), torch.randn(5, 8, generator=gen)
        fluxlite.ag_gemm(a, w, impl="auto")
        key = dispatch.Key.of("ag_gemm", fluxlite.resolve_group(), a, w, W * a.shape[0])
        assert dispatch.remembered(key).source == "measured", "the call was to measure (fluxlite.timing)"
        loaded = sorted(m for m in sys.modules if _is_profile(m))
        assert not loaded, loaded
    finally:
        fluxlite.release_workspaces()
        dist.destroy_process_group()


def test_measuring_ranks_load_no_profiler_module(tmp_path):
    """Ranks in fresh interpreters (spawned: nothing imported before) import every core module and
    measure an ``auto`` call: still no profiler module is loaded."""
    mp.start_processes(_fresh_rank, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True, start_method="spawn")
