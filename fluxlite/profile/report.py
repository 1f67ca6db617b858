"""The profiler's outputs: a table on the terminal, JSON, CSV and a PNG chart.

JSON (``profile.json``, schema :data:`SCHEMA`): ``{"schema", "meta", "rows"}``. ``meta``: device,
world size, backend, dtype, versions (torch, triton, fluxlite, nccl), date, git commit, command and
the timing settings. Each row: ``op, M, K, N, names, flops``; ``times_ms[impl][mode]`` (modes of
:data:`fluxlite.profile.timing.MODES`); ``speedup_vs_sequential[impl][mode]``;
``exposed_comm_ms[impl]``; ``overlap_efficiency[impl]``; ``rel_err[impl]`` (against sequential);
``failed[impl]`` (why); ``auto`` (what ``impl="auto"`` chooses: impl, config, label, source).
NaN is written as ``null``.

CSV (``profile.csv``): one line per row and implementation, with the same figures.

PNG (``profile.png``, needs matplotlib): per shape, a bar per implementation, stacked: the GEMM
alone, then the exposed communication on top (none where the implementation beat the GEMM alone).
"""

from __future__ import annotations

import csv
import json
import math
import warnings
from pathlib import Path

from .run import IMPLS, REPORTED_MODES

SCHEMA = "fluxlite-profile/1"
CSV_FIELDS = ("op", "M", "K", "N", "names", "impl", *(f"{m}_ms" for m in REPORTED_MODES),
              *(f"speedup_{m}" for m in REPORTED_MODES), "exposed_comm_ms", "overlap_efficiency", "auto")
CHART_IMPLS = ("sequential", "decomposed", "fused", "torch_symm_mem")


def no_nan(v):
    """NaN -> None, recursively, so the JSON is standard."""
    if isinstance(v, dict):
        return {k: no_nan(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [no_nan(x) for x in v]
    return None if isinstance(v, float) and math.isnan(v) else v


def label(row: dict) -> str:
    return f"{'AG' if row['op'] == 'ag_gemm' else 'RS'} {row['M']}x{row['K']}->{row['N']}"


def write_json(path: Path, meta: dict, rows: list[dict]) -> None:
    path.write_text(json.dumps(no_nan(dict(schema=SCHEMA, meta=meta, rows=rows)), indent=1))


def read_json(path: Path) -> tuple[dict, list[dict]]:
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a {SCHEMA} file")
    nan = float("nan")

    def back(v):  # null -> NaN, so the figures compute as they did
        if isinstance(v, dict):
            return {k: back(x) for k, x in v.items()}
        return nan if v is None else v
    rows = [dict(r, times_ms=back(r["times_ms"]), speedup_vs_sequential=back(r["speedup_vs_sequential"]),
                 exposed_comm_ms=back(r["exposed_comm_ms"]), overlap_efficiency=back(r["overlap_efficiency"]))
            for r in data["rows"]]
    return data["meta"], rows


def write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(CSV_FIELDS)
        for r in rows:
            for impl in (i for i in IMPLS if i in r["times_ms"]):
                t = r["times_ms"][impl]
                s = r["speedup_vs_sequential"].get(impl, {})
                out.writerow([r["op"], r["M"], r["K"], r["N"], " ".join(r["names"]), impl,
                              *(t[m] for m in REPORTED_MODES), *(s.get(m, "") for m in REPORTED_MODES),
                              r["exposed_comm_ms"].get(impl, ""), r["overlap_efficiency"].get(impl, ""),
                              r["auto"]["label"]])


def write_png(path: Path, meta: dict, rows: list[dict]) -> bool:
    """The stacked-bar chart; ``False`` (with a warning) when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        warnings.warn("fluxlite-profile: matplotlib is not installed, so no PNG was written "
                      "(pip install 'fluxlite[profile]', or re-plot later with --from-json)", RuntimeWarning)
        return False
    impls = [i for i in CHART_IMPLS if any(i in r["times_ms"] for r in rows)]
    width = 0.8 / max(len(impls), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(rows) * max(len(impls), 1) / 3), 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for j, impl in enumerate(impls):
        xs, gemm, exposed = [], [], []
        for i, r in enumerate(rows):
            if impl in r["times_ms"] and "gemm" in r["times_ms"]:
                xs.append(i + (j - (len(impls) - 1) / 2) * width)
                gemm.append(r["times_ms"]["gemm"]["throughput"])
                exposed.append(max(0.0, r["exposed_comm_ms"][impl]))
        ax.bar(xs, gemm, width, color=colors[j % len(colors)], label=f"{impl}: GEMM", edgecolor="black", linewidth=0.4)
        ax.bar(xs, exposed, width, bottom=gemm, color=colors[j % len(colors)], alpha=0.45, hatch="//",
               label=f"{impl}: exposed comm", edgecolor="black", linewidth=0.4)
    ax.set_xticks(range(len(rows)), [label(r) + ("\n" + ", ".join(r["names"]) if r["names"] else "") for r in rows],
                  rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ms per call (throughput mode)")
    ax.set_title(f"fluxlite-profile: {meta['device']} x{meta['world_size']}, {meta['dtype']}, "
                 f"{meta.get('git_commit') or ''}", fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def format_table(meta: dict, rows: list[dict]) -> str:
    """The terminal table: throughput ms of each implementation, the speedups of fused over
    sequential, its exposed communication and overlap efficiency, and what auto chooses."""
    head = ("op, M x K -> N", "passes", "GEMM", "comm", "seq", "decomp", "fused", "torch", "fused tp", "fused lat",
            "exposed", "overlap", "auto")
    widths = (24, 16, 8, 8, 8, 8, 8, 8, 9, 9, 8, 8, 24)
    lines = [f"{meta['device']} x{meta['world_size']} ({meta['backend']}), {meta['dtype']}, torch {meta['torch']}, "
             f"triton {meta['triton']}, fluxlite {meta['fluxlite']} {meta.get('git_commit') or ''}; ms are "
             f"throughput medians over {meta['rounds']} rounds, max over ranks",
             " ".join(f"{h:>{w}}" for h, w in zip(head, widths))]

    def ms(r, impl):
        v = r["times_ms"].get(impl, {}).get("throughput", math.nan)
        return "-" if math.isnan(v) else f"{v:.3f}"

    for r in rows:
        sp = r["speedup_vs_sequential"].get("fused", {})
        cells = (label(r), ",".join(r["names"])[:16], *(ms(r, i) for i in ("gemm", "comm", "sequential", "decomposed",
                                                                          "fused", "torch_symm_mem")),
                 f"{sp.get('throughput', math.nan):.2f}x", f"{sp.get('latency', math.nan):.2f}x",
                 f"{r['exposed_comm_ms'].get('fused', math.nan):.3f}",
                 f"{r['overlap_efficiency'].get('fused', math.nan):.2f}", f"{r['auto']['label']} ({r['auto']['source']})")
        lines.append(" ".join(f"{c:>{w}}" for c, w in zip(cells, widths)))
    lines.append("fused tp / lat: speedup of fused over sequential in throughput / latency mode; exposed: "
                 "T_fused - T_gemm (ms); overlap: (T_gemm + T_comm - T_fused) / min(T_gemm, T_comm)")
    failed = {label(r): sorted(r["failed"]) for r in rows if r["failed"]}
    if failed:
        lines.append(f"failed (left out): {failed}")
    return "\n".join(lines)


def write_all(out_dir: Path, meta: dict, rows: list[dict]) -> list[Path]:
    """JSON, CSV and (if matplotlib is there) PNG under ``out_dir``; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "profile.json", out_dir / "profile.csv"]
    write_json(paths[0], meta, rows)
    write_csv(paths[1], rows)
    if write_png(out_dir / "profile.png", meta, rows):
        paths.append(out_dir / "profile.png")
    return paths
