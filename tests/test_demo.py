"""The main job (README Quick start, first command) runs end to end on 2 CPU ranks under torchrun;
bad arguments are refused at parse time with one line and exit status 2, once."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from fluxlite import demo


@pytest.mark.timeout(120)
def test_demo_runs_checks_and_times_every_impl_under_torchrun():
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "fluxlite.demo", "--M", "192", "--K", "96", "--N", "64", "--iters", "2", "--warmup", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith(("ag_gemm", "gemm_rs"))]
    seen = {(r[0], r[1]): r for r in rows}
    for op in ("ag_gemm", "gemm_rs"):
        for impl in ("sequential", "fused", "auto"):
            row = seen.get((op, impl))
            assert row is not None, f"no row for {op}/{impl} in:\n{proc.stdout}"
            assert row[-1] == "ok", row
            assert float(row[2]) > 0, row


@pytest.fixture
def no_torchrun(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("argv,names", [
    (["--M", "0"], "--M/--m: must be positive, got 0"),
    (["--M", "-2"], "--M/--m: must be positive, got -2"),
    (["--K", "0"], "--K/--k: must be positive"),
    (["--N", "-8"], "--N/--n: must be positive"),
    (["--N", "8x"], "expected an integer, got '8x'"),
    (["--iters", "0"], "--iters: must be positive"),
    (["--warmup", "-1"], "--warmup: must be 0 or more"),
    (["--impls", "fused,nope"], "comma list of sequential, decomposed, fused, auto"),
    (["--dtype", "int8"], "invalid choice"),
])
def test_bad_arguments_give_one_line_and_exit_2(argv, names, capsys, no_torchrun):
    with pytest.raises(SystemExit) as exc:
        demo.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and err.startswith("fluxlite.demo: error:") and names in err, err


def test_sizes_not_divisible_by_the_ranks_are_refused_once(capsys, monkeypatch):
    """Under torchrun every rank checks; rank 0 alone reports it (exit 2), the others exit quietly."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank, code, err_lines in (("1", 0, 0), ("0", 2, 1)):
        monkeypatch.setenv("RANK", rank)
        with pytest.raises(SystemExit) as exc:
            demo.main(["--M", "6", "--K", "3", "--N", "8"])
        err = capsys.readouterr().err
        assert exc.value.code == code and err.count("\n") == err_lines, (rank, err)
    assert "K = 3 must be divisible by the number of ranks (2)" in err


def test_defaults_are_resolved_at_parse_time(no_torchrun):
    args = demo.parse_args([])
    cpu = not torch.cuda.is_available()
    assert (args.m, args.k, args.n, args.iters) == ((1024, 1024, 1024, 10) if cpu else (4096, 8192, 8192, 20))
    assert args.impls == list(demo.IMPLS) and demo.parse_args(["--impls", "decomposed"]).impls == ["decomposed"]
