"""fluxlite: tensor-parallel AllGather-GEMM and GEMM-ReduceScatter with the communication hidden
behind the GEMM, tile by tile (after FLUX, arXiv 2406.06858).

Public surface::

    fluxlite.init()                                   # process group from torchrun's environment
    fluxlite.ag_gemm(a, weight, bias, impl="auto", return_gathered=False)
    fluxlite.gemm_rs(a, weight, bias, impl="auto")
    fluxlite.synchronize()                            # raise a timeout a GPU kernel recorded
    fluxlite.get_workspace(group, device)             # the symmetric workspace handle
    fluxlite.library.ag_gemm(...), .gemm_rs(...)      # the same ops as torch custom ops, with
                                                      # autograd, for torch.compile
"""

from .errors import FluxliteCallMismatchError, FluxliteError, FluxliteTimeoutError
from .flags import DEFAULT_TIMEOUT_S, set_default_timeout
from .group import TPGroup, init, resolve_group
from .ops import ag_gemm, gemm_rs, release_workspaces, synchronize
from . import library  # registers torch.ops.fluxlite.* (custom ops for torch.compile)
from .schedule import TileSchedule, ag_schedule, rs_schedule
from .workspace import SymmetricWorkspace, get_workspace

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "FluxliteCallMismatchError",
    "FluxliteError",
    "FluxliteTimeoutError",
    "SymmetricWorkspace",
    "TPGroup",
    "TileSchedule",
    "ag_gemm",
    "ag_schedule",
    "gemm_rs",
    "get_workspace",
    "init",
    "release_workspaces",
    "resolve_group",
    "rs_schedule",
    "set_default_timeout",
    "synchronize",
]
