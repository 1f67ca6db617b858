"""The fused protocol's machinery, shared by every op (:mod:`fluxlite.ops`): call plans, call
agreement, joining and raising (:mod:`fluxlite.fused.call`), what a workspace's fused calls keep
between calls (:mod:`fluxlite.fused.state`), and the producer (:mod:`fluxlite.fused.producer`)."""

from . import producer
from .call import Call, Plan, get_plan
from .state import FusedState, forget_states, release_workspaces, state_of, states_of, synchronize

__all__ = ["Call", "FusedState", "Plan", "forget_states", "get_plan", "producer", "release_workspaces", "state_of",
           "states_of", "synchronize"]
