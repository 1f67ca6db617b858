"""The fused implementations: one module per op (its plan, producer program, CPU consumer and GPU
launch), on top of :mod:`fluxlite.fused.call` (plans, call agreement, joining and raising) and
:mod:`fluxlite.fused.state` (what a workspace's fused calls keep between calls: epochs, failure,
plans, the producer)."""

from .ag_gemm import ag_gemm
from .ag_gemm import prepare as prepare_ag_gemm
from .call import Plan
from .gemm_rs import gemm_rs
from .gemm_rs import prepare as prepare_gemm_rs
from .state import FusedState, forget_states, state_of, states_of

__all__ = ["FusedState", "Plan", "ag_gemm", "forget_states", "gemm_rs", "prepare_ag_gemm", "prepare_gemm_rs",
           "state_of", "states_of"]
