"""Ways the safety tests make a rank fail at a chosen point of a fused call, shared by the CPU and
GPU safety tests (tests/test_safety_cpu.py, tests/test_gpu_safety.py). fluxlite is imported where it
is used: a GPU test's worker imports it only once its device is set."""

from __future__ import annotations


def never_finished(call) -> None:
    """Run ``call()``, a fused gemm_ar (two-shot), as a rank that dies once its partials have left:
    its call ends without its second shot (its reduced splits and their ``reduced`` flags, its end):
    the peers' ends time out on its first split's flag, the first they wait for.
    Its program is built afresh only for a plan and data half it has not run yet: give it a new shape."""
    from fluxlite.ops import AR

    AR.second_shot = lambda c, out, reduced: []
    AR.second_shot_end = lambda c, out, reduced: None
    try:
        call()
    finally:
        del AR.second_shot, AR.second_shot_end
