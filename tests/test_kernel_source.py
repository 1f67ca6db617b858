"""The kernels' fused tile loops carry no value from one tile to the next (fluxlite/kernels/gemm_core.py).

Triton 3.6 fuses a tile loop written ``tl.range(..., flatten=...)`` with its K loop so that a value
the tile loop carries takes its new value when the next tile's K steps begin, before the current
tile's epilogue has read it. Carried that way, GEMM-RS's slot of the tile stored last counted each
peer tile before its stores (docs/protocol.md). The interpreter runs no fused loop and the compile
check cannot tell, so this reads the kernels' source: in the body of every loop over a ``tl.range``
that names ``flatten``, no name is assigned that is bound before the loop (a parameter or an earlier
assignment). A branch on a constexpr ``C`` whose flatten condition requires ``not C`` is compiled
out wherever the loop is fused, and is not read.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[1] / "fluxlite" / "kernels"


def _flatten_arg(loop: ast.For) -> ast.expr | None:
    call = loop.iter
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "range":
        return next((k.value for k in call.keywords if k.arg == "flatten"), None)
    return None


def _excluded_by(flatten: ast.expr) -> set[str]:
    """The constexprs ``C`` that the flatten condition requires false (``... and not C``)."""
    terms = flatten.values if isinstance(flatten, ast.BoolOp) and isinstance(flatten.op, ast.And) else [flatten]
    return {t.operand.id for t in terms
            if isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not) and isinstance(t.operand, ast.Name)}


def _stored(node: ast.AST, skip: set[str]) -> set[str]:
    """Names assigned under ``node``, leaving out the bodies of ``if C:`` for ``C`` in ``skip``."""
    names: set[str] = set()

    def visit(n: ast.AST) -> None:
        if isinstance(n, ast.If) and isinstance(n.test, ast.Name) and n.test.id in skip:
            for child in n.orelse:
                visit(child)
            return
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        for child in ast.iter_child_nodes(n):
            visit(child)

    for stmt in node.body:
        visit(stmt)
    return names


def carried_names(source: str) -> list[tuple[str, int, str]]:
    """``(function, line, name)`` for each name a fused tile loop in ``source`` carries."""
    found = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef):
            continue
        for loop in ast.walk(fn):
            flatten = _flatten_arg(loop) if isinstance(loop, ast.For) else None
            if flatten is None:
                continue
            before = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
            before |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
                       and n.lineno < loop.lineno}
            for name in sorted(_stored(loop, _excluded_by(flatten)) & before):
                found.append((fn.name, loop.lineno, name))
    return found


def test_no_fused_tile_loop_of_the_kernels_carries_a_value():
    fused_loops = 0
    for path in sorted(KERNELS.glob("*.py")):
        source = path.read_text()
        fused_loops += source.count("flatten=")
        assert carried_names(source) == [], f"{path.name}: a fused tile loop carries a value"
    assert fused_loops >= 3, "AG-GEMM's local loop and GEMM-RS's two runs are fused"


def test_the_check_finds_a_carried_slot_and_reads_past_compiled_out_branches():
    carried = textwrap.dedent("""
        def peer_run(first, stop, programs, pending):
            for tile in tl.range(first, stop, programs, flatten=True):
                slot = load(tile)
                publish(pending)
                pending = slot
            return pending
    """)
    assert carried_names(carried) == [("peer_run", 3, "pending")]
    compiled_out = textwrap.dedent("""
        def local(start, stop, PEERS: tl.constexpr):
            ready = -1
            for tile in tl.range(start, stop, 1, flatten=is_tma and not PEERS):
                if PEERS:
                    ready = tile
                else:
                    x = tile
            return ready
    """)
    assert carried_names(compiled_out) == []
    assert carried_names(compiled_out.replace("and not PEERS", "")) == [("local", 4, "ready")]
