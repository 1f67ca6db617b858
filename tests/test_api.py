"""``fluxlite.__all__`` is the documented API: every name in it appears in the README's API section,
and every ``fluxlite.<name>`` there is in it, or is one of the documented submodules."""

from __future__ import annotations

import re
from pathlib import Path

import fluxlite

SUBMODULES = {"parallel", "profile", "library", "fused"}  # documented where the README uses them


def test_all_is_the_readme_api():
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    api = readme[readme.index("## API"):readme.index("\n## ", readme.index("## API") + 1)]
    named = set(re.findall(r"\bfluxlite\.([A-Za-z_][A-Za-z0-9_]*)", api)) - {"__all__"}
    assert set(fluxlite.__all__) - named == set(), "in __all__ but not in the README's API section"
    assert named - set(fluxlite.__all__) - SUBMODULES == set(), "in the README's API section but not in __all__"
    assert all(hasattr(fluxlite, name) for name in fluxlite.__all__)
