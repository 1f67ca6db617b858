"""What fluxlite's commands share (the demo, the profiler, the scripts): an argument parser whose
errors are one line from rank 0, argparse types, each rank's share of the CPU threads, and the
environment that keeps NVLink multicast off.

A core module: the profiler builds on it, and it imports nothing of the profiler.
"""

from __future__ import annotations

import argparse
import os

# What keeps NCCL, torch's symmetric memory and NVSHMEM off NVLink multicast; read when they come up.
NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def no_nvlink_multicast() -> None:
    """Set :data:`NO_MULTICAST_ENV` where the environment does not say otherwise. Call it before the
    process group comes up."""
    for name, value in NO_MULTICAST_ENV.items():
        os.environ.setdefault(name, value)


def on_rank_0() -> bool:
    """Whether this process is rank 0 of torchrun's ranks (or runs without torchrun)."""
    return os.environ.get("RANK", "0") == "0"


class ArgumentParser(argparse.ArgumentParser):
    """The parser of fluxlite's commands: a bad argument gives one line on stderr and exit status 2.

    Under torchrun every rank parses the same arguments and reaches the same verdict, so rank 0
    alone reports it; the others exit quietly with status 0, which keeps torchrun from stopping
    rank 0 (as it stops every worker once one fails) before its line is out."""

    def error(self, message: str):
        if not on_rank_0():
            self.exit(0)
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def positive(kind: type = int, zero_ok: bool = False, *, expected: bool = False):
    """An argparse ``type``: ``kind(text)`` that is positive (or 0 too, with ``zero_ok``); NaN is refused.

    A refusal says ``expected an integer, got 'x'`` or ``must be positive, got 0``; with ``expected``,
    both say what is wanted in one phrase: ``expected a positive integer, got 0``."""
    noun = "integer" if kind is int else "number"
    bound = "0 or more" if zero_ok else "positive"
    wanted = f"a {'non-negative' if zero_ok else 'positive'} {noun}"

    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            what = wanted if expected else "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not (v >= 0 if zero_ok else v > 0):
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {v}" if expected else f"must be {bound}, got {text}")
        return v
    return parse


def positive_list(kind: type = int):
    """An argparse ``type``: a comma list of positive ``kind`` values, as a tuple."""
    one = positive(kind)

    def parse(text: str) -> tuple:
        try:
            return tuple(one(t) for t in text.split(","))
        except argparse.ArgumentTypeError:
            noun = "integers" if kind is int else "numbers"
            raise argparse.ArgumentTypeError(f"expected a comma list of positive {noun}, got {text!r}") from None
    return parse


def comma_list(choices: tuple[str, ...]):
    """An argparse ``type``: a comma list of ``choices``, as a tuple (each once, in the given order)."""
    def parse(text: str) -> tuple[str, ...]:
        items = tuple(dict.fromkeys(t.strip() for t in text.split(",")))
        if not items or not set(items) <= set(choices):
            raise argparse.ArgumentTypeError(f"expected a comma list of {', '.join(choices)}, got {text!r}")
        return items
    return parse


def threads_per_rank(default_local: int = 1) -> int:
    """The CPU threads of one rank: the host's cores shared evenly by its ranks (torchrun's
    ``LOCAL_WORLD_SIZE``, else ``default_local``), at least one."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", default_local))
    return max(1, (os.cpu_count() or 1) // local)
