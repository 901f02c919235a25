"""The evaluation sweep: every registered policy on many traces, one table and plots.

    python -m themis.sim.experiments sweep --traces DIR --out DIR [--quick]

Traces (``--traces DIR``): the philly-gavel ``*.trace`` files (one Philly virtual cluster,
VC) in DIR and in its ``seed=N`` subdirectories, with ``simulation_throughputs.json``
next to them or above; by default the first ``--vcs-per-seed`` (3) of each directory.
Without ``--traces`` the bundled trace (Philly seed 0, first 14 days) is split by VC
instead, with a message saying so. Each VC's jobs are grouped into apps (24-h window,
themis.sim.philly), jobs longer than ``--max-job-hours`` are shortened, and the first
``--apps`` (48) apps by arrival form the trace; VCs with fewer apps are left out.

Runs: every trace x workload (1: the apps as converted; 2: successive halving,
themis.sim.hyperband) x contention (1x, 2x, 4x) x policy (by default Themis with each of
its three filter orders, Gavel's FTF, SRSF and fair share; ``--policies all``: every registered
one, plus Themis with the other form of the ideal time). Contention c runs on a cluster of
``G / c`` GPUs where G (the 1x size, a multiple of 4, at least 8) is twice the trace's
average load - its serial GPU-hours over its arrival span (at least 24 h) - so that at 1x
the cluster is on average half busy while apps arrive; machines have the default
cluster's shapes (8-, 4- and 1-GPU machines in its proportions, themis.sim.cluster).
Every run also gets the trace's lower bound on the worst app's stretch
(themis.sim.bound) and its own worst stretch over it; a run below its bound is an error.

Each run's metrics (themis.sim.metrics) are cached as ``OUT/runs/<run>.json`` under a
fingerprint of the options: an interrupted sweep resumes where it stopped. Runs go to
``--jobs`` worker processes; a bar on stderr shows runs done / total. Outputs:
``OUT/runs.csv`` (one row per run), ``OUT/table.csv`` and ``OUT/table.md`` (per policy:
mean and spread across traces), ``OUT/sweep.json`` (options, traces, timing) and plots.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from themis.mechanism.fairness import DEFAULT_IDEAL_TIME, IdealTime
from themis.mechanism.topology import Topology
from themis.sim.cluster import DEFAULT_SHAPES, build_cluster
from themis.sim.errors import SimError, SpecError
from themis.sim.workload import Workload

#: the policies a default sweep runs at full size: Themis with each of its three filter
#: orders (the default, ranked, the paper's), the two strongest baselines of the
#: 16-app sweep (Gavel's FTF, SRSF) and
#: instantaneous fair share (what YARN's FairScheduler does); ``--policies all`` runs every
#: registered policy (docs/evaluation.md, "The evaluation sweep")
DEFAULT_POLICIES = ("themis", "themis-served-now", "themis-inf", "gavel", "srsf",
                    "fairshare")
#: VC traces per seed directory a default sweep takes (the first by name): 3 x 4 seeds at
#: 48 apps keep a default sweep near 30 minutes on 2 cores
DEFAULT_VCS_PER_SEED = 3
SWEEP_VERSION = 7  # bump when a run's meaning changes: cached runs are then redone
CONTENTIONS = (1, 2, 4)
WORKLOADS = (1, 2)
#: per-run metrics kept in runs.csv (themis.sim.metrics.summarize keys)
RUN_METRICS = tuple(
    [f"{s}_rho_{d}" for d in ("exact", "paper", "gavel") for s in ("max", "p99", "p95", "median")]
    + [f"frac_rho_{d}_gt_1" for d in ("exact", "paper", "gavel")]
    + [f"frac_rho_{d}_gt_105" for d in ("exact", "paper", "gavel")]
    + [f"frac_excess_rho_{d}_gt_105" for d in ("exact", "paper", "gavel")]
    + ["max_stretch", "p99_stretch"]
    + [f"{s}_excess_rho_{d}" for d in ("exact", "paper", "gavel") for s in ("max", "p99")]
    + [f"{s}_floor_{d}" for d in ("exact", "paper") for s in ("median", "max")]
    + ["gpu_time_hours", "idle_gpu_hours", "avg_jct_hours", "makespan_hours",
       "mean_placement_score", "restarts", "rounds", "wall_s"]
)


@dataclass(frozen=True, slots=True)
class TraceRef:
    """One trace: a VC file of a seed directory, or one VC of the bundled trace."""

    name: str  # "seed=0/0e4a51"
    path: str  # the .trace file, or "builtin"
    vc: str


@dataclass(frozen=True, slots=True)
class Options:
    apps: int = 48
    max_job_hours: float = 48.0
    contentions: tuple[int, ...] = CONTENTIONS
    workloads: tuple[int, ...] = WORKLOADS
    lease_minutes: float = 10.0
    restart_seconds: float = 35.0
    seed: int = 0
    lease_spread_minutes: float | None = None  # None: half of lease_minutes

    def fingerprint(self) -> str:
        doc = json.dumps({"v": SWEEP_VERSION, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(doc.encode()).hexdigest()[:10]


@dataclass(frozen=True, slots=True)
class Run:
    trace: TraceRef
    workload: int
    contention: int
    gpus: int
    policy: str  # a registered policy, or "themis@paper" / "themis@exact"

    @property
    def key(self) -> str:
        safe = self.trace.name.replace("/", "_").replace("=", "")
        return f"{safe}-w{self.workload}-c{self.contention}-{self.policy.replace('@', '-')}"


# ------------------------------------------------------------------ traces and clusters
def find_traces(root: Path | None, opts: Options) -> tuple[list[TraceRef], str]:
    """The traces of the sweep and a sentence saying where they came from."""
    if root is None:
        from themis.sim.loader import load_any

        w = load_any("builtin")
        vcs = sorted({a.id.rsplit("-", 1)[0] for a in w.apps})
        refs = [TraceRef(f"builtin/{vc}", "builtin", vc) for vc in vcs]
        kept = [r for r in refs if len(load_trace(r, opts).apps) >= opts.apps]
        return kept, (
            f"no --traces given: using the bundled trace (Philly seed 0, first 14 days), "
            f"{len(kept)} of its {len(refs)} VCs with >= {opts.apps} apps; pass --traces DIR "
            "(e.g. a philly-gavel checkout with seed=N directories) for more"
        )
    if not root.is_dir():
        raise SpecError(str(root), "--traces must be a directory of *.trace files "
                        "or of seed=N directories")
    files = sorted(root.glob("*.trace")) + sorted(root.glob("*/*.trace"))
    if not files:
        raise SpecError(str(root), "no *.trace file in it or in its subdirectories")
    refs = [TraceRef(str(f.relative_to(root).with_suffix("")), str(f), f.stem) for f in files]
    kept = [r for r in refs if len(load_trace(r, opts).apps) >= opts.apps]
    return kept, (f"{len(kept)} of {len(refs)} VC traces in {root} have >= {opts.apps} apps")


def per_seed(traces: Sequence[TraceRef], n: int, where: str) -> tuple[list[TraceRef], str]:
    """The first ``n`` traces of each seed directory (``seed=0/...``; the bundled trace's
    VCs count as one directory)."""
    taken: dict[str, int] = {}
    out = []
    for t in traces:
        seed = t.name.rsplit("/", 1)[0] if "/" in t.name else ""
        if taken.get(seed, 0) < n:
            taken[seed] = taken.get(seed, 0) + 1
            out.append(t)
    return out, f"{where}; the first {n} of each seed directory: {len(out)} traces"


def load_trace(ref: TraceRef, opts: Options, workload: int = 1) -> Workload:
    """The first ``opts.apps`` apps of the trace (workload 1), or their workload-2 form."""
    from themis.sim.hyperband import workload2
    from themis.sim.loader import load_any
    from themis.sim.philly import convert

    if ref.path == "builtin":
        w = load_any("builtin")
        apps = [a for a in w.apps if a.id.rsplit("-", 1)[0] == ref.vc]
        w = Workload(apps, dict(w.meta))
    else:
        w = convert(Path(ref.path), window_s=86400.0, max_job_hours=opts.max_job_hours)
    w = w.head(opts.apps)
    return workload2(w, seed=opts.seed) if workload == 2 else w


def base_gpus(w: Workload) -> int:
    """The 1x cluster size: twice the average load over the arrival span (see module doc)."""
    if not w.apps:
        return 8
    span_h = max(24.0, (w.apps[-1].arrival - w.apps[0].arrival) / 3600)
    load = sum(a.total_work for a in w.apps) / 3600 / span_h
    return max(8, 4 * math.ceil(2 * load / 4))


def sized_cluster(gpus: int) -> Topology:
    """``gpus`` GPUs in the default cluster's machine shapes and proportions (8-GPU
    machines, then 4-GPU ones, 1-GPU machines for the rest), ~32 GPUs per rack."""
    scale = gpus / sum(c * sum(s) for c, s in DEFAULT_SHAPES)
    counts = [round(c * scale) for c, _ in DEFAULT_SHAPES[:2]]
    while sum(n * sum(s) for n, (_, s) in zip(counts, DEFAULT_SHAPES, strict=False)) > gpus:
        counts[0 if counts[0] else 1] -= 1
    used = sum(n * sum(s) for n, (_, s) in zip(counts, DEFAULT_SHAPES, strict=False))
    shapes = [(n, s) for n, (_, s) in zip(counts, DEFAULT_SHAPES, strict=False) if n > 0]
    if gpus - used:
        shapes.append((gpus - used, DEFAULT_SHAPES[2][1]))
    return build_cluster(shapes, racks=max(1, round(gpus / 32)))


# ------------------------------------------------------------------ planning and running
def policy_names(ideal_variants: bool = True) -> list[str]:
    """Every registered policy; Themis also with the non-default form of T_id."""
    from themis.sim.policies import POLICY_NAMES

    names = list(POLICY_NAMES)
    if ideal_variants:
        other = [f for f in IdealTime if f is not DEFAULT_IDEAL_TIME]
        names += [f"themis@{f}" for f in other]
    return names


def plan(traces: Sequence[TraceRef], opts: Options, policies: Sequence[str]) -> list[Run]:
    runs: list[Run] = []
    for ref in traces:
        g1 = base_gpus(load_trace(ref, opts))
        for wl in opts.workloads:
            for c in opts.contentions:
                gpus = max(1, g1 // c)
                runs.extend(Run(ref, wl, c, gpus, p) for p in policies)
    return runs


def run_one(run: Run, opts: Options) -> dict[str, Any]:
    """Simulate one run and return its row (trace, setting, metrics)."""
    from themis.sim.engine import SimConfig, Simulator
    from themis.sim.metrics import summarize
    from themis.sim.policies import make_policy

    name, _, form = run.policy.partition("@")
    ideal = IdealTime(form) if form else DEFAULT_IDEAL_TIME
    w = load_trace(run.trace, opts, run.workload)
    cfg = SimConfig(lease_s=opts.lease_minutes * 60, restart_s=opts.restart_seconds,
                    seed=opts.seed, check_invariants=False, ideal_time=ideal,
                    lease_spread_s=None if opts.lease_spread_minutes is None
                    else opts.lease_spread_minutes * 60)
    r = Simulator(sized_cluster(run.gpus), w, make_policy(name), cfg).run()
    s = summarize(r)
    row: dict[str, Any] = {
        "trace": run.trace.name, "vc": run.trace.vc, "workload": run.workload,
        "contention": run.contention, "gpus": run.gpus, "policy": run.policy,
        "ideal_time": str(ideal), "apps": s["apps"],
    }
    row.update({k: s[k] for k in RUN_METRICS})
    return row


def _work(item: tuple[Run, Options, str]) -> dict[str, Any]:
    run, opts, cache = item
    row = run_one(run, opts)
    path = Path(cache) / f"{run.key}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(row))
    tmp.replace(path)  # atomic: an interrupted run leaves no half-written cache file
    return row


def execute(runs: Sequence[Run], opts: Options, out: Path, jobs: int,
            progress: bool = True) -> tuple[list[dict[str, Any]], int]:
    """Run (or read from the cache) every run: (rows in plan order, runs simulated)."""
    cache = out / "runs" / opts.fingerprint()
    cache.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, Any]] = {}
    todo: list[Run] = []
    for run in runs:
        path = cache / f"{run.key}.json"
        if path.is_file():
            rows[run.key] = json.loads(path.read_text())
        else:
            todo.append(run)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(runs), initial=len(runs) - len(todo), unit="run",
                   desc="sweep", file=sys.stderr)
    # the slowest runs first, so that the last minutes are not one long run on one core
    todo.sort(key=lambda r: (not r.policy.startswith("themis"), r.contention != 4))
    items = [(r, opts, str(cache)) for r in todo]
    try:
        if jobs <= 1:
            for item in items:
                row = _work(item)
                rows[item[0].key] = row
                if bar is not None:
                    bar.update(1)
        else:
            import multiprocessing

            with multiprocessing.get_context("spawn").Pool(jobs) as pool:
                for row in pool.imap_unordered(_work, items):
                    rows[_key_of(row)] = row
                    if bar is not None:
                        bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return [rows[r.key] for r in runs], len(todo)


def attach_bounds(rows: Sequence[dict[str, Any]], traces: Sequence[TraceRef], opts: Options,
                  out: Path) -> None:
    """Add each run's lower bound on the worst app's stretch (themis.sim.bound) and its
    max stretch over it, computed once per trace and setting and cached beside the runs.
    A run below its bound is a defect of the bound or the simulator: SimError."""
    from themis.sim.bound import bounds
    from themis.sim.isolated import isolated_finish_times

    cache = out / "runs" / opts.fingerprint() / "bounds.json"
    known: dict[str, float] = json.loads(cache.read_text()) if cache.is_file() else {}
    refs = {t.name: t for t in traces}
    new = False
    for row in rows:
        key = f"{row['trace']}|w{row['workload']}|{row['gpus']}"
        if key not in known:
            w = load_trace(refs[row["trace"]], opts, row["workload"])
            topo = sized_cluster(row["gpus"])
            iso = isolated_finish_times(w.apps, len(topo))
            known[key] = bounds(w.apps, topo, opts.restart_seconds, iso)["bound_max_stretch"]
            new = True
        bound = known[key]
        row["bound_max_stretch"] = bound
        row["max_stretch_over_bound"] = float(row["max_stretch"]) / bound
        if row["max_stretch_over_bound"] < 1 - 1e-6:
            raise SimError(f"run {row['trace']} workload {row['workload']} {row['gpus']} GPUs "
                           f"{row['policy']}: max stretch {row['max_stretch']:.6g} is below "
                           f"the lower bound {bound:.6g} (a defect: please report)")
    if new:
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps(known))
        tmp.replace(cache)


def _key_of(row: dict[str, Any]) -> str:
    ref = TraceRef(row["trace"], "", row["vc"])
    return Run(ref, row["workload"], row["contention"], row["gpus"], row["policy"]).key


# ------------------------------------------------------------------ aggregation
#: (column, per-run metric, how it is aggregated across traces) of the table
TABLE: tuple[tuple[str, str, str], ...] = (
    ("max rho", "max_rho_exact", "value"),
    ("p99 rho", "p99_rho_exact", "value"),
    ("p95 rho", "p95_rho_exact", "value"),
    ("median rho", "median_rho_exact", "value"),
    ("apps rho>1", "frac_rho_exact_gt_1", "value"),
    ("apps rho>1.05", "frac_rho_exact_gt_105", "value"),
    ("apps excess>1.05", "frac_excess_rho_exact_gt_105", "value"),
    ("max excess", "max_excess_rho_exact", "value"),
    ("p99 excess", "p99_excess_rho_exact", "value"),
    ("p99 excess / best", "p99_excess_rho_exact", "ratio"),
    ("max stretch / bound", "max_stretch_over_bound", "value"),
    ("max rho (paper T_id)", "max_rho_paper", "value"),
    ("p99 rho (paper T_id)", "p99_rho_paper", "value"),
    ("apps rho>1 (paper T_id)", "frac_rho_paper_gt_1", "value"),
    ("p99 excess (paper T_id)", "p99_excess_rho_paper", "value"),
    ("max rho (Gavel)", "max_rho_gavel", "value"),
    ("p99 rho (Gavel)", "p99_rho_gavel", "value"),
    ("p95 rho (Gavel)", "p95_rho_gavel", "value"),
    ("median rho (Gavel)", "median_rho_gavel", "value"),
    ("apps rho>1 (Gavel)", "frac_rho_gavel_gt_1", "value"),
    ("apps rho>1.05 (Gavel)", "frac_rho_gavel_gt_105", "value"),
    ("apps excess>1.05 (Gavel)", "frac_excess_rho_gavel_gt_105", "value"),
    ("max excess (Gavel)", "max_excess_rho_gavel", "value"),
    ("p99 excess (Gavel)", "p99_excess_rho_gavel", "value"),
    ("p99 excess (Gavel) / best", "p99_excess_rho_gavel", "ratio"),
    ("GPU time / best", "gpu_time_hours", "ratio"),
    ("avg JCT / best", "avg_jct_hours", "ratio"),
    ("makespan / best", "makespan_hours", "ratio"),
)
#: metrics where a policy "wins" a trace by being lowest (the issue's targets)
WIN_METRICS = ("p99_excess_rho_exact", "p99_excess_rho_gavel", "frac_rho_exact_gt_1",
               "frac_rho_gavel_gt_1", "frac_excess_rho_exact_gt_105",
               "frac_excess_rho_gavel_gt_105")


def _setting(row: dict[str, Any]) -> tuple[str, int, int]:
    return (row["trace"], row["workload"], row["contention"])


def aggregate(rows: Sequence[dict[str, Any]], policies: Sequence[str]
              ) -> list[dict[str, Any]]:
    """Per policy (and per contention level, then all): mean, standard deviation and median
    across traces of each table metric; ratios are to the best policy of the same trace."""
    by_setting: dict[tuple[str, int, int], dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_setting.setdefault(_setting(r), {})[r["policy"]] = r
    out = []
    levels: list[int | None] = sorted({r["contention"] for r in rows})
    for level in [*levels, None]:
        settings = {k: v for k, v in by_setting.items() if level is None or k[2] == level}
        for p in policies:
            agg: dict[str, Any] = {"contention": "all" if level is None else f"{level}x",
                                   "policy": p, "runs": 0}
            values: dict[str, list[float]] = {col: [] for col, _, _ in TABLE}
            wins = {m: 0 for m in WIN_METRICS}
            for per in settings.values():
                if p not in per:
                    continue
                agg["runs"] += 1
                for col, m, how in TABLE:
                    v = float(per[p][m])
                    if how == "ratio":
                        best = min(float(x[m]) for x in per.values())
                        v = v / best if best > 0 else 1.0
                    values[col].append(v)
                for m in WIN_METRICS:
                    best = min(float(x[m]) for x in per.values())
                    wins[m] += float(per[p][m]) <= best * (1 + 1e-9)
            for col, _, _ in TABLE:
                vs = [v for v in values[col] if math.isfinite(v)]
                agg[f"{col} mean"] = statistics.fmean(vs) if vs else math.nan
                agg[f"{col} sd"] = statistics.pstdev(vs) if len(vs) > 1 else 0.0
                agg[f"{col} median"] = statistics.median(vs) if vs else math.nan
            for m in WIN_METRICS:
                agg[f"wins {m}"] = wins[m] / agg["runs"] if agg["runs"] else math.nan
            out.append(agg)
    return out


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    if not rows:
        path.write_text("")
        return
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def _fmt(mean: float, sd: float, pct: bool = False) -> str:
    if not math.isfinite(mean):
        return "-"
    if pct:
        return f"{100 * mean:.1f}% ± {100 * sd:.1f}"
    return f"{mean:.3g} ± {sd:.2g}"


#: the markdown table's groups of columns (one sub-table each)
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("rho with the exact T_id (section 3.2)",
     ("max rho", "p99 rho", "median rho", "apps rho>1", "apps rho>1.05", "apps excess>1.05",
      "max excess", "p99 excess", "p99 excess / best", "max stretch / bound")),
    ("Gavel's rho (JCT / JCT in an isolated 1/N share)",
     ("max rho (Gavel)", "p99 rho (Gavel)", "median rho (Gavel)", "apps rho>1 (Gavel)",
      "apps rho>1.05 (Gavel)", "apps excess>1.05 (Gavel)", "max excess (Gavel)",
      "p99 excess (Gavel)", "p99 excess (Gavel) / best")),
    ("rho with the paper's T_id (Eq. 2) - and efficiency",
     ("max rho (paper T_id)", "p99 rho (paper T_id)", "apps rho>1 (paper T_id)",
      "p99 excess (paper T_id)", "GPU time / best", "avg JCT / best", "makespan / best")),
)


def markdown(table: Sequence[dict[str, Any]], header: str) -> str:
    """The table as markdown: per contention level (then all runs), one sub-table per
    group of columns and the share of runs each policy wins."""
    lines = [header, ""]
    for level in dict.fromkeys(r["contention"] for r in table):
        sel = [r for r in table if r["contention"] == level]
        lines += [f"### Contention {level} ({sel[0]['runs']} runs per policy)", ""]
        for title, cols in GROUPS:
            lines += [f"{title}:", "", "| policy | " + " | ".join(cols) + " |",
                      "|---|" + "---|" * len(cols)]
            for r in sel:
                cells = [_fmt(r[f"{c} mean"], r[f"{c} sd"], pct=c.startswith("apps"))
                         for c in cols]
                lines.append(f"| {r['policy']} | " + " | ".join(cells) + " |")
            lines.append("")
        lines += ["Share of runs where the policy is lowest (ties count for all):", "",
                  "| policy | p99 excess rho | p99 excess rho (Gavel) | apps rho>1 | "
                  "apps rho>1 (Gavel) | apps excess>1.05 | apps excess>1.05 (Gavel) |",
                  "|---|---|---|---|---|---|---|"]
        for r in sel:
            cells = [f"{100 * r[f'wins {m}']:.0f}%" for m in WIN_METRICS]
            lines.append(f"| {r['policy']} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------ plots
def write_plots(rows: Sequence[dict[str, Any]], policies: Sequence[str], out: Path,
                subtitle: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    levels = sorted({r["contention"] for r in rows})
    panels = (
        ("p99_excess_rho_exact", "p99 excess rho (rho / rho_floor, exact T_id)", True),
        ("p99_excess_rho_gavel", "p99 excess rho, Gavel's rho", True),
        ("frac_excess_rho_exact_gt_105", "fraction of apps with excess rho > 1.05", False),
        ("max_stretch_over_bound", "worst app's stretch / lower bound (ratio)", True),
    )
    for metric, label, log in panels:
        fig, axes = plt.subplots(1, len(levels), figsize=(4 * len(levels), 4.2), sharey=True,
                                 squeeze=False)
        for ax, level in zip(axes[0], levels, strict=True):
            data = [[float(r[metric]) for r in rows
                     if r["policy"] == p and r["contention"] == level
                     and math.isfinite(float(r[metric]))] for p in policies]
            ax.boxplot(data, showfliers=True, whis=(5, 95))
            ax.set_xticks(range(1, len(policies) + 1), policies, rotation=60, fontsize=7)
            ax.set_title(f"contention {level}x", fontsize=9)
            ax.set_xlabel("policy")
            if log:
                ax.set_yscale("log")
            ax.grid(axis="y", lw=0.3)
        axes[0][0].set_ylabel(label + (" (log scale)" if log else ""))
        fig.suptitle(f"{label} per run (box: quartiles, whiskers: 5-95%)\n{subtitle}",
                     fontsize=9)
        fig.tight_layout()
        paths.append(out / f"sweep_{metric}.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    # efficiency: GPU time relative to the best policy of each run's trace and setting
    by_setting: dict[tuple[str, int, int], dict[str, float]] = {}
    for r in rows:
        by_setting.setdefault(_setting(r), {})[r["policy"]] = float(r["gpu_time_hours"])
    fig, ax = plt.subplots(figsize=(7, 4.2))
    data = []
    for p in policies:
        data.append([v[p] / min(v.values()) for v in by_setting.values() if p in v])
    ax.boxplot(data, whis=(5, 95))
    ax.set_xticks(range(1, len(policies) + 1), policies, rotation=60, fontsize=7)
    ax.set_xlabel("policy")
    ax.set_ylabel("GPU time / lowest GPU time of the run's trace (ratio)")
    ax.set_title(f"GPU time (GPU-hours held) relative to the most efficient policy\n{subtitle}",
                 fontsize=9)
    ax.grid(axis="y", lw=0.3)
    fig.tight_layout()
    paths.append(out / "sweep_gpu_time.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


# ------------------------------------------------------------------ command line
def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--traces", type=Path, default=None, metavar="DIR",
                   help="directory of philly-gavel *.trace files (one per VC) or of seed=N "
                   "directories of them, with simulation_throughputs.json beside or above "
                   "(default: none - the bundled trace, split by VC, with a message)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="output directory: runs/ (cache), runs.csv, table.csv, table.md, "
                   "sweep.json and sweep_*.png (required)")
    p.add_argument("--apps", type=int, default=None, metavar="N",
                   help="the first N apps of each VC form its trace; VCs with fewer apps "
                   "are left out (default: 48; 6 with --quick)")
    p.add_argument("--max-job-hours", type=float, default=48.0, metavar="H",
                   help="jobs longer than H hours on their own GPUs are shortened to H "
                   "(as the bundled trace; 0: keep) (default: %(default)s)")
    p.add_argument("--contentions", default="1,2,4", metavar="LIST",
                   help="contention levels c: the cluster has 1/c of the 1x size "
                   "(default: %(default)s)")
    p.add_argument("--workloads", default="1,2", metavar="LIST",
                   help="1: apps as converted; 2: successive-halving apps "
                   "(default: %(default)s)")
    p.add_argument("--policies", default=None, metavar="LIST",
                   help="comma-separated policies, or 'all' (every registered policy plus "
                   "Themis with the non-default form of T_id); 'themis@paper' / "
                   "'themis@exact' run Themis with that form of T_id (default: "
                   f"{','.join(DEFAULT_POLICIES)})")
    p.add_argument("--vcs-per-seed", type=int, default=DEFAULT_VCS_PER_SEED, metavar="N",
                   help="the first N VC traces (by name) of each seed directory that have "
                   "enough apps; 0: all of them (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), metavar="N",
                   help="worker processes (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the workload-2 transform and of the simulations "
                   "(default: %(default)s)")
    p.add_argument("--lease-spread-minutes", type=float, default=None, metavar="M",
                   help="the leases of one round last 10 +- M/2 minutes, spread evenly over "
                   "the round's apps (yarn-site lease-spread-ms; 0: all 10 minutes, the "
                   "paper's) (default: 5, half the lease)")
    p.add_argument("--quick", action="store_true",
                   help="a tiny subset for CI (< 1 minute): 2 traces, 6 apps, contention "
                   "1x and 4x, workload 2, policies themis, srtf, fifo")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                   help="progress bar of runs done / total on stderr (default: on)")


def _ints(text: str, what: str, allowed: Iterable[int] | None = None) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise SpecError(what, f"{text!r} is not a comma-separated list of integers") from None
    ok = set(allowed) if allowed is not None else None
    if not vals or any(v < 1 or (ok is not None and v not in ok) for v in vals):
        raise SpecError(what, f"{text!r}: values must be "
                        + (f"in {sorted(ok)}" if ok else "integers >= 1"))
    return vals


def run_cli(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    try:
        if args.apps is not None and args.apps < 1:
            raise SpecError("--apps", f"{args.apps} must be >= 1")
        opts = Options(
            apps=args.apps or (6 if args.quick else 48),
            max_job_hours=args.max_job_hours,
            contentions=(1, 4) if args.quick else _ints(args.contentions, "--contentions"),
            workloads=(2,) if args.quick else _ints(args.workloads, "--workloads", WORKLOADS),
            seed=args.seed,
            lease_spread_minutes=args.lease_spread_minutes,
        )
        if opts.lease_spread_minutes is not None \
                and not 0 <= opts.lease_spread_minutes <= opts.lease_minutes:
            raise SpecError("--lease-spread-minutes", f"{opts.lease_spread_minutes} must be "
                            f"between 0 and the lease length, {opts.lease_minutes:g}")
        from themis.sim.policies import POLICY_NAMES

        if args.policies == "all":
            policies = policy_names()
        elif args.policies:
            policies = [p.strip() for p in args.policies.split(",") if p.strip()]
        elif args.quick:
            policies = ["themis", "srtf", "fifo" if "fifo" in POLICY_NAMES else "gandiva"]
        else:
            policies = list(DEFAULT_POLICIES)
        if args.vcs_per_seed < 0:
            raise SpecError("--vcs-per-seed", f"{args.vcs_per_seed} must be >= 0")
        for p in policies:
            name, _, form = p.partition("@")
            if name not in POLICY_NAMES or (form and (name != "themis" or form not in
                                                      {str(f) for f in IdealTime})):
                raise SpecError("--policies", f"unknown policy {p!r}; valid: "
                                f"{', '.join(POLICY_NAMES)}, themis@exact, themis@paper")
        traces, where = find_traces(args.traces, opts)
        if args.quick:
            traces = traces[:2]
        elif args.vcs_per_seed:
            traces, where = per_seed(traces, args.vcs_per_seed, where)
        if not traces:
            raise SpecError(str(args.traces or "builtin"),
                            f"no VC trace has >= {opts.apps} apps (lower --apps)")
    except (SpecError, SimError) as exc:
        print(f"themis sweep: error: {exc}", file=sys.stderr)
        return 2
    print(f"themis sweep: {where}", file=sys.stderr)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    runs = plan(traces, opts, policies)
    print(f"themis sweep: {len(traces)} traces x {len(opts.workloads)} workloads x "
          f"{len(opts.contentions)} contention levels x {len(policies)} policies = "
          f"{len(runs)} runs on {args.jobs} worker(s)", file=sys.stderr)
    rows, simulated = execute(runs, opts, out, args.jobs, args.progress)
    try:
        attach_bounds(rows, traces, opts, out)
    except SimError as exc:
        print(f"themis sweep: error: {exc}", file=sys.stderr)
        return 1
    write_csv(out / "runs.csv", rows)
    table = aggregate(rows, policies)
    write_csv(out / "table.csv", table)
    elapsed = time.perf_counter() - started
    subtitle = (f"{len(traces)} traces x {len(opts.workloads)} workloads, first {opts.apps} "
                f"apps per VC")
    header = (f"Sweep of {len(runs)} runs ({subtitle}); mean ± standard deviation across "
              f"traces; rho with the exact T_id unless marked, excess = rho / rho_floor; "
              f"time ratios to the best policy of each trace.")
    (out / "table.md").write_text(markdown(table, header) + "\n")
    write_plots(rows, policies, out, subtitle)
    (out / "sweep.json").write_text(json.dumps({
        "options": asdict(opts), "policies": policies, "traces": [t.name for t in traces],
        "source": where, "runs": len(runs), "simulated": simulated,
        "cached": len(runs) - simulated, "elapsed_s": round(elapsed, 1),
        "cpu_s_of_runs": round(sum(float(r["wall_s"]) for r in rows), 1),
        "jobs": args.jobs, "fingerprint": opts.fingerprint(),
    }, indent=2))
    print(f"themis sweep: {len(runs)} runs ({simulated} simulated, "
          f"{len(runs) - simulated} from the cache) in {elapsed:.0f} s; wrote {out}/table.md, "
          f"table.csv, runs.csv and sweep_*.png", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m themis.sim.experiments sweep",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configure(p)
    return run_cli(p.parse_args(argv))
