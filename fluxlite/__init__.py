"""fluxlite: tensor-parallel AllGather-GEMM and GEMM-ReduceScatter with the communication hidden
behind the GEMM, tile by tile (after FLUX, arXiv 2406.06858).

Public surface (``__all__``, the API the README documents)::

    fluxlite.init()                                   # process group from torchrun's environment -> TPGroup
    fluxlite.resolve_group(group)                     # the TPGroup of any process group
    fluxlite.ag_gemm(a, weight, bias, impl="auto", return_gathered=False)
    fluxlite.gemm_rs(a, weight, bias, impl="auto")
    fluxlite.synchronize()                            # raise a timeout a GPU kernel recorded
    fluxlite.release_workspaces()                     # before destroying the group; to recover
    fluxlite.get_workspace(group, device)             # the symmetric workspace handle
    fluxlite.set_default_timeout(seconds)             # DEFAULT_TIMEOUT_S otherwise
    FluxliteError, FluxliteTimeoutError, FluxliteCallMismatchError

Submodules with their own documentation: ``fluxlite.parallel`` (layers), ``fluxlite.library`` (the
same ops as torch custom ops, with autograd, for torch.compile), ``fluxlite.profile``.
"""

from .errors import FluxliteCallMismatchError, FluxliteError, FluxliteTimeoutError
from .host_flags import DEFAULT_TIMEOUT_S, set_default_timeout
from .group import TPGroup, init, resolve_group
from . import ops
from .ops import OPS, release_workspaces, synchronize
from . import library  # registers torch.ops.fluxlite.* (custom ops for torch.compile)
from .workspace import SymmetricWorkspace, get_workspace

__version__ = "0.1.0"

globals().update({name: getattr(ops, name) for name in OPS})  # every op's public function: fluxlite.ag_gemm, ...

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "FluxliteCallMismatchError",
    "FluxliteError",
    "FluxliteTimeoutError",
    "SymmetricWorkspace",
    "TPGroup",
    *OPS,
    "get_workspace",
    "init",
    "release_workspaces",
    "resolve_group",
    "set_default_timeout",
    "synchronize",
]
