"""One op, one object: the machinery every op shares never names an op, and every op is whole.

Read from the source: no string in the shared modules (the call path, the fused machinery, the
schedule, the dispatch, the timer) is an op's name or one of the short op names the protocol once
used, outside docstrings. And each registered op defines every method of the :class:`Op` interface
and is exported as ``fluxlite.<name>``."""

from __future__ import annotations

import ast
from pathlib import Path

import fluxlite
from fluxlite.ops import OPS, Op

ROOT = Path(__file__).resolve().parents[1] / "fluxlite"
SHARED = [ROOT / "ops" / "op.py", ROOT / "schedule.py", ROOT / "dispatch.py", ROOT / "timing.py",
          *sorted((ROOT / "fused").glob("*.py"))]
REQUIRED = ("check", "out_shape", "dispatch_rows", "sequential", "decomposed", "chunk_rows", "block_slot",
            "prepare", "fused")


def _strings(path: Path) -> set[str]:
    """The string constants of ``path`` that are not docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings}


def test_the_shared_machinery_never_names_an_op():
    names = {*OPS, "ag", "rs"}
    assert len(OPS) >= 2 and len(SHARED) > 5
    for path in SHARED:
        found = names & _strings(path)
        assert not found, f"{path.relative_to(ROOT.parent)} names the op(s) {sorted(found)}"


def test_the_check_can_fail():
    """A module that names an op is caught (the check above is not vacuous)."""
    assert "ag_gemm" in _strings(ROOT / "ops" / "ag_gemm.py")


def test_every_op_is_whole_and_exported():
    codes = set()
    for name, op in OPS.items():
        assert op.name == name and isinstance(op, Op)
        for method in REQUIRED:
            assert getattr(type(op), method) is not getattr(Op, method), f"{name} does not define {method}"
        assert op.code not in codes, f"{name} reuses signature code {op.code}"
        codes.add(op.code)
        assert name in fluxlite.__all__ and getattr(fluxlite, name).__module__ == f"fluxlite.ops.{name}"
