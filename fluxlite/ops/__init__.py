"""The ops: one :class:`~fluxlite.ops.op.Op` object each, in one module each (``ag_gemm``, ``gemm_rs``,
``gemm_ar``),
registered in :data:`OPS`, and the calls that act on all of them.

Every module of this package but :mod:`~fluxlite.ops.op` is an op: it is imported here, and its
public function, named after the op, is exported (``fluxlite.ag_gemm``, ``fluxlite.gemm_rs``). A
new op's module is found the same way (docs/adding_an_op.md).
"""

import importlib
import pkgutil

from ..fused import release_workspaces, synchronize
from .op import OPS, Op

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "op":
        importlib.import_module(f"{__name__}.{_module.name}")

from .ag_gemm import AG  # noqa: E402  (the ops the layers and the library call by name)
from .gemm_ar import AR  # noqa: E402
from .gemm_rs import RS  # noqa: E402

globals().update({name: getattr(importlib.import_module(f"{__name__}.{name}"), name) for name in OPS})
__all__ = ["AG", "AR", "OPS", "Op", "RS", "release_workspaces", "synchronize", *OPS]
