"""The profiler's outputs: a table on the terminal, JSON, CSV and a PNG chart.

JSON (``profile.json``, schema :data:`SCHEMA`): ``{"schema", "meta", "rows"}``. ``meta``: device,
world size, backend, dtype, versions (torch, triton, fluxlite, nccl), date, fluxlite's git commit,
command, the timing settings, and ``stopped`` (why the run ended early, or null; then ``rows`` holds
the shapes finished before, of ``shapes`` planned). Each row: ``op, M, K, N, names, flops``;
``times_ms[impl][mode]`` (modes of :data:`fluxlite.timing.MODES`); ``limit_ms`` (the
overlap limit, throughput mode); per overlapped implementation ``speedup_vs_sequential[impl][mode]``,
``exposed_comm_ms[impl]``, ``efficiency[impl]`` and ``vs_limit[impl]``, and ``bound[mode]``
(sequential over the limit in throughput and latency mode: the most speedup over sequential an
overlapped implementation can reach there; the figures of :mod:`fluxlite.profile.run`);
``rel_err[impl]`` (against sequential); ``failed[impl]`` (why);
``auto_vs_best[mode]`` (``auto`` over the fastest of sequential, decomposed and fused, throughput
and latency mode and eager calls back to back: :data:`fluxlite.profile.run.AUTO_MODES`) and
``auto_vs_best_bounds[mode]`` (``[low, median, high]`` of the same ratio taken round by round, the
bounds of its median at 95%; null where too few rounds bound it);
``auto`` (what ``impl="auto"`` chooses for a call that declares no mode: impl, config, label,
source; ``modes``: its choice's label per declared mode, where measured). NaN (and an infinity)
is written as ``null``.
:func:`read_json` also reads the earlier ``fluxlite-profile/2`` files (no eager mode: NaN) and
``fluxlite-profile/1`` files (no limit either); a file without ``bound`` gets it from its times.

CSV (``profile.csv``): one line per row and implementation, with the same figures; the row's
figures (``limit_ms``, ``bound_*``, ``auto_vs_best_*``, ``auto``) on each of its lines.

PNG (``profile.png``, needs matplotlib): per shape, a bar per implementation, stacked: the GEMM
alone, then the exposed communication on top (none where the implementation beat the GEMM alone);
a black line across the shape's bars at the limit, and each overlapped bar's efficiency above it.
"""

from __future__ import annotations

import csv
import json
import math
import warnings
from pathlib import Path

from .presets import SHORT
from .run import AUTO_MODES, BOUND_MODES, IMPLS, REPORTED_MODES, bound, fastest

SCHEMA = "fluxlite-profile/3"
READABLE = (SCHEMA, "fluxlite-profile/2", "fluxlite-profile/1")
PER_IMPL = ("exposed_comm_ms", "efficiency", "vs_limit")  # the row's {impl: figure} fields
CSV_FIELDS = ("op", "M", "K", "N", "names", "impl", *(f"{m}_ms" for m in REPORTED_MODES),
              *(f"speedup_{m}" for m in REPORTED_MODES), "exposed_comm_ms", "limit_ms", "efficiency", "vs_limit",
              *(f"bound_{m}" for m in BOUND_MODES), *(f"auto_vs_best_{m}" for m in AUTO_MODES), "auto")
CHART_IMPLS = ("sequential", "decomposed", "fused", "torch_symm_mem")
EFFICIENCY_TEXT = ("efficiency = (T_seq - T_impl) / (T_seq - T_limit): the share of the communication the hardware "
                   "lets an overlapped op hide that it hides (1: all, 0: none, as sequential; '-': nothing to hide)")
LIMIT_TEXT = "limit: the GEMM alone while the copy engine moves the op's bytes beside it, the best an overlapped op can do"
BOUND_TEXT = ("bound tp / lat: sequential over the limit in throughput / latency mode, the most speedup over "
              "sequential an overlapped op can reach there (in latency mode a long GEMM starts on an idle device "
              "and runs slower; on calls of some 0.1 ms the limit's own copy launch can cost more than a fused "
              "call's reduction)")
UNDER_LIMIT = 0.03
"""How far under the limit (relative) a fused time is marked as under it, past the rounds' spread."""
UNDER_LIMIT_TEXT = ("!: fused ran under the limit, which is then no floor: the fused call's own GEMMs beat "
                    "torch.matmul on whole-16-byte rows, which the GEMM and the limit run (cuBLASLt without a "
                    "workspace, or the Triton kernel at some shapes off 128), or the clocks moved between the "
                    "timings; its efficiency then exceeds 1")


def no_nan(v):
    """NaN and infinities -> None, recursively, so the JSON is standard."""
    if isinstance(v, dict):
        return {k: no_nan(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [no_nan(x) for x in v]
    return None if isinstance(v, float) and not math.isfinite(v) else v


def bounds_span(bounds) -> str:
    """``low-high`` of a ratio's ``[low, high]`` bounds (:func:`fluxlite.dispatch.paired_bounds`), or
    ``-`` where there are none (too few rounds: infinite, or null as read back from JSON)."""
    low, high = bounds
    finite = all(v is not None and math.isfinite(v) for v in (low, high))
    return f"{low:.3f}-{high:.3f}" if finite else "-"


def label(row: dict) -> str:
    return f"{SHORT[row['op']]} {row['M']}x{row['K']}->{row['N']}"


def write_json(path: Path, meta: dict, rows: list[dict]) -> None:
    path.write_text(json.dumps(no_nan(dict(schema=SCHEMA, meta=meta, rows=rows)), indent=1))


def read_json(path: Path) -> tuple[dict, list[dict]]:
    """``(meta, rows)`` of a profile.json; raises ``ValueError`` naming ``path`` if it is not one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") not in READABLE:
        raise ValueError(f"{path} is not a fluxlite-profile JSON file (schema {' or '.join(READABLE)})")
    nan = float("nan")

    def back(v):  # null -> NaN, so the figures compute as they did
        if isinstance(v, dict):
            return {k: back(x) for k, x in v.items()}
        return nan if v is None else v
    rows = []
    for r in data["rows"]:
        r = dict(r, times_ms=back(r["times_ms"]), speedup_vs_sequential=back(r["speedup_vs_sequential"]),
                 limit_ms=back(r.get("limit_ms")), **{k: back(r.get(k, {})) for k in PER_IMPL})
        r.pop("overlap_efficiency", None)  # schema 1's figure, replaced by the efficiency against the limit
        # files written before the bound was a figure: the same ratio of their times
        r["bound"] = back(r["bound"]) if "bound" in r else bound(r["times_ms"])
        rows.append(r)
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
                              *(t.get(m, "") for m in REPORTED_MODES), *(s.get(m, "") for m in REPORTED_MODES),
                              r["exposed_comm_ms"].get(impl, ""), r["limit_ms"], r["efficiency"].get(impl, ""),
                              r["vs_limit"].get(impl, ""),
                              *("" if math.isnan(v) else v for v in (r["bound"].get(m, math.nan) for m in BOUND_MODES)),
                              *("" if math.isnan(v) else v for v in (_auto_vs_best(r, m) for m in AUTO_MODES)),
                              r["auto"]["label"]])


def _auto_vs_best(row: dict, mode: str) -> float:
    """``auto_vs_best[mode]`` of ``row``; NaN where ``auto`` or its candidates were not timed."""
    v = row.get("auto_vs_best", {}).get(mode)
    return math.nan if v is None else v


def bound_cell(row: dict) -> str:
    """``bound`` in throughput and latency mode, ``1.16/1.06x``; ``-`` for a mode not timed."""
    cells = [row.get("bound", {}).get(m, math.nan) for m in BOUND_MODES]
    if all(math.isnan(v) for v in cells):
        return "-"
    return "/".join("-" if math.isnan(v) else f"{v:.2f}" for v in cells) + "x"


def auto_ran(row: dict, mode: str) -> str | None:
    """The implementation (``sequential``, ``decomposed`` or ``fused``, its config left out) that
    ``auto`` ran in ``mode`` of :data:`AUTO_MODES`: a declared mode's choice in throughput and latency
    mode, an undeclared call's in eager calls; None where the row does not say."""
    auto = row.get("auto") or {}
    label = auto.get("modes", {}).get(mode) if mode != "eager" else None
    label = label or auto.get("label")  # no choice per mode: one choice for every mode
    return None if label is None else label.split("[")[0]


def auto_vs_best_cell(row: dict) -> str:
    """``auto``'s time over the best candidate's, throughput/latency/eager, each marked ``^`` where
    ``auto`` ran another implementation than the one that read fastest (without it, a figure over 1
    is one implementation timed twice) and ``*`` where the median's 95% bounds over the rounds lie
    above 1 (``auto`` slower beyond the rounds' spread); ``-`` where ``auto`` was not timed (in that
    mode)."""
    bounds = row.get("auto_vs_best_bounds") or {}
    cells = []
    for m in AUTO_MODES:
        v = _auto_vs_best(row, m)
        low = (bounds.get(m) or [None])[0]
        other = auto_ran(row, m) not in (None, fastest(row["times_ms"], m))
        cells.append("-" if math.isnan(v) else f"{v:.2f}" + ("^" if other else "")
                     + ("*" if low is not None and low > 1 else ""))
    return "-" if all(c == "-" for c in cells) else "/".join(cells)


def auto_cell(auto: dict) -> str:
    """What auto runs: its choice (and source), then a declared mode's where it differs."""
    other = [f"{m[:3]}: {c}" for m, c in auto.get("modes", {}).items() if c != auto["label"]]
    return f"{auto['label']} ({auto['source']})" + "".join(f"; {o}" for o in other)


def title(meta: dict) -> str:
    """One line: where it ran, and which fluxlite (its git commit when imported from a checkout)."""
    commit = f", git {meta['git_commit']}" if meta.get("git_commit") else ""
    stopped = f"; PARTIAL, stopped by {meta['stopped']}" if meta.get("stopped") else ""
    return (f"fluxlite-profile: {meta['device']} x{meta['world_size']} ({meta['backend']}), {meta['dtype']}; "
            f"fluxlite {meta['fluxlite']}{commit}{stopped}")


def write_png(path: Path, meta: dict, rows: list[dict]) -> bool:
    """The chart (:func:`chart`) as a PNG; ``False`` (with a warning) when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        warnings.warn("fluxlite-profile: matplotlib is not installed, so no PNG was written "
                      "(pip install 'fluxlite[profile]', or re-plot later with --from-json)", RuntimeWarning)
        return False
    fig = chart(meta, rows)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return True


def chart(meta: dict, rows: list[dict]):
    """The stacked-bar chart of the module docstring, a matplotlib ``Figure``; its legend sits
    right of the axes, off the bars."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    impls = [i for i in CHART_IMPLS if any(i in r["times_ms"] for r in rows)]
    width = 0.8 / max(len(impls), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(rows) * max(len(impls), 1) / 3) + 2.5, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for j, impl in enumerate(impls):
        color = colors[j % len(colors)]
        for i, r in enumerate(rows):
            if impl not in r["times_ms"] or "gemm" not in r["times_ms"]:
                continue
            x, gemm = i + (j - (len(impls) - 1) / 2) * width, r["times_ms"]["gemm"]["throughput"]
            exposed = max(0.0, r["exposed_comm_ms"][impl])
            ax.bar(x, gemm, width, color=color, edgecolor="black", linewidth=0.4)
            ax.bar(x, exposed, width, bottom=gemm, color=color, alpha=0.45, hatch="//", edgecolor="black", linewidth=0.4)
            eff = r["efficiency"].get(impl, math.nan)
            if impl != "sequential" and math.isfinite(eff):
                ax.annotate(f"{eff:.2f}", (x, gemm + exposed), xytext=(0, 2), textcoords="offset points",
                            ha="center", va="bottom", fontsize=6)
    for i, r in enumerate(rows):  # the limit: one segment across the shape's bar group
        if math.isfinite(r.get("limit_ms", math.nan)):
            ax.hlines(r["limit_ms"], i - 0.45, i + 0.45, colors="black", linewidth=1.6)
    ax.set_xticks(range(len(rows)), [label(r) + ("\n" + ", ".join(r["names"]) if r["names"] else "") for r in rows],
                  rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ms per call (throughput mode)")
    ax.set_title(title(meta), fontsize=9)
    handles = [Patch(facecolor=colors[j % len(colors)], edgecolor="black", label=impl) for j, impl in enumerate(impls)]
    handles += [Patch(facecolor="white", edgecolor="black", hatch="//",
                      label="exposed communication\n(above the GEMM alone)"),
                Line2D([], [], color="black", linewidth=1.6, label="limit: GEMM with the\ncopies beside it"),
                Line2D([], [], linestyle="none", marker="$0.8$", color="black", markersize=10,
                       label="efficiency against\nthe limit (above bars)")]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    return fig


def format_table(meta: dict, rows: list[dict]) -> str:
    """The terminal table: throughput ms of each implementation and of the limit, the speedups of
    fused over sequential, the most the limit allows (:func:`bound_cell`), fused's efficiency against
    the limit, ``auto`` over the best candidate (:func:`auto_vs_best_cell`), and what auto chooses. The passes
    column (the model's layer passes a shape serves) is shown only when some row has them."""
    passes = any(r["names"] for r in rows)
    head = ("op, M x K -> N", *(("passes",) if passes else ()), "GEMM", "comm", "copy", "limit", "seq", "decomp",
            "fused", "torch", "fused tp", "fused lat", "bound tp/lat", "fused eff", "auto/best", "auto")
    widths = (24, *((16,) if passes else ()), 8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 12, 9, 20, 24)  # auto/best: up to 1.00^*/1.00^*/1.00^*
    lines = [f"{title(meta)}; ms are throughput medians over {meta['rounds']} rounds, max over ranks; "
             f"torch {meta['torch']}, triton {meta['triton']}",
             " ".join(f"{h:>{w}}" for h, w in zip(head, widths))]

    def ms(r, impl):
        v = r["times_ms"].get(impl, {}).get("throughput", math.nan)
        return "-" if math.isnan(v) else f"{v:.3f}"

    def num(v, fmt):
        return "-" if math.isnan(v) else fmt.format(v)

    under = False
    for r in rows:
        sp = r["speedup_vs_sequential"].get("fused", {})
        eff = num(r["efficiency"].get("fused", math.nan), "{:.2f}")
        if r["vs_limit"].get("fused", math.nan) < 1 - UNDER_LIMIT:
            eff, under = eff + "!", True
        cells = (label(r), *((",".join(r["names"])[:16] or "-",) if passes else ()),
                 *(ms(r, i) for i in ("gemm", "comm", "copy", "limit", "sequential", "decomposed", "fused",
                                      "torch_symm_mem")),
                 num(sp.get("throughput", math.nan), "{:.2f}x"), num(sp.get("latency", math.nan), "{:.2f}x"),
                 bound_cell(r), eff, auto_vs_best_cell(r), auto_cell(r["auto"]))
        lines.append(" ".join(f"{c:>{w}}" for c, w in zip(cells, widths)))
    lines += ["copy: the op's bytes moved by the copy engine alone; " + LIMIT_TEXT,
              "fused tp / lat: speedup of fused over sequential in throughput / latency mode; " + BOUND_TEXT,
              "fused eff: its " + EFFICIENCY_TEXT,
              "auto/best: auto's time over the fastest of sequential, decomposed and fused, throughput/latency/"
              "eager (eager calls back to back, where auto runs an undeclared call's choice) "
              "(^: auto ran another implementation than the one that read fastest; without it a figure over "
              "1 is one implementation timed twice; *: its rounds' 95% bounds lie above 1, a loss beyond the "
              "rounds' spread)",
              "auto: what impl='auto' runs in a call that declares no mode (and where that came from); "
              "thr / lat: what it runs in a declared mode, where that differs (fluxlite.dispatch.assume_mode)"]
    if under:
        lines.append(UNDER_LIMIT_TEXT)
    failed = {label(r): sorted(r["failed"]) for r in rows if r["failed"]}
    if failed:
        lines.append(f"failed (left out): {failed}")
    if meta.get("stopped"):
        lines.append(f"partial: {len(rows)} of {meta.get('shapes', len(rows))} shapes measured")
    return "\n".join(lines)


def write_all(out_dir: Path, meta: dict, rows: list[dict], png: bool = True) -> list[Path]:
    """JSON, CSV and (with ``png`` and matplotlib) PNG under ``out_dir``; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "profile.json", out_dir / "profile.csv"]
    write_json(paths[0], meta, rows)
    write_csv(paths[1], rows)
    if png and write_png(out_dir / "profile.png", meta, rows):
        paths.append(out_dir / "profile.png")
    return paths
