"""The preview's outputs: ``summary.json`` (aggregates, calibration, the worst apps, what
was left out and inferred, settings), ``apps.json`` (one row per replayed app, with its
inferred fields flagged) and ``report.html`` (self-contained: inline CSS, plots as inline
SVG; no script, no external file)."""

from __future__ import annotations

import html
import io
import math
import statistics
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from themis.preview.trace import REASONS, Selection, StockApp
from themis.sim.engine import AppResult, SimResult
from themis.sim.metrics import percentile, summarize

#: how many points a CDF curve is drawn with at most (the data is in apps.json)
CDF_POINTS = 2000
#: what each left-out reason means, for the report
REASON_TEXT = {
    "state": "in a state not asked for (--states)",
    "not_finished": "not finished (no finishedTime)",
    "outside_window": "started outside the window (--since/--until)",
    "no_gpu": "no GPU-seconds (no yarn.io/gpu in resourceSecondsMap, or 0)",
    "no_runtime": "GPU-seconds but no runtime (finished in the ms it started)",
}
#: how each field of a replayed app is obtained (docs/preview.md, "What is read and what
#: is inferred")
FIELDS = (
    ("arrival", "read", "startedTime, relative to the first replayed app"),
    ("GPU work", "read", "resourceSecondsMap yarn.io/gpu (GPU-seconds held)"),
    ("observed JCT", "read", "finishedTime - startedTime"),
    ("name, user, queue, type, state", "read", "as the RM reports them"),
    ("GPU demand", "inferred", "round(GPU-seconds / runtime), half up, at least 1; "
                               "capped at the cluster's GPUs"),
    ("jobs", "assumed", "one job per app: the whole GPU work at the inferred demand"),
    ("jobs of Themis apps", "read", "their AM's job records in HDFS (spec.json, state.json): "
                                    "jobs, a job's GPUs, steps per Hyperband rung, measured "
                                    "iteration times"),
    ("placement", "assumed", "compute-intensive: no slowdown within a rack, 5 % across racks"),
)


def _hours(s: float) -> float:
    return s / 3600.0


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def per_app_rows(selection: Selection, results: Mapping[str, SimResult]) -> list[dict[str, Any]]:
    """One row per replayed app, in arrival order."""
    by_policy = {p: {a.id: a for a in r.apps} for p, r in results.items()}
    rows = []
    for s in selection.apps:
        a = s.app
        row: dict[str, Any] = {
            "number": a.number,
            "id": a.id,
            "name": a.name,
            "user": a.user,
            "queue": a.queue,
            "type": a.app_type,
            "state": a.state,
            "started": _iso(a.started_ms),
            "arrival_hours": _hours(s.arrival_s),
            "gpus": s.gpus,
            "inferred": list(s.inferred),
            "structure": "job records" if s.records is not None else "one job (assumed)",
            "jobs": len(s.records.jobs) if s.records is not None else 1,
            "phases": len(s.records.phases) if s.records is not None else 1,
            "gpu_hours": _hours(s.gpu_seconds),
            "observed_jct_hours": _hours(s.observed_jct_s),
            "replay": {},
        }
        for p, apps in by_policy.items():
            r = apps[a.id]
            row["replay"][p] = {"jct_hours": _hours(r.jct), "rho": r.rho,
                                "gpu_hours": _hours(r.gpu_time), "restarts": r.restarts}
        rows.append(row)
    return rows


def calibration(selection: Selection, result: SimResult) -> dict[str, Any]:
    """Observed JCT against the replay of the current policy: per-app relative error
    (replay - observed) / observed, its median and worst magnitude, and the average JCT."""
    by_id = {a.id: a for a in result.apps}
    errs: list[tuple[float, StockApp, AppResult]] = []
    for s in selection.apps:
        r = by_id[s.app.id]
        errs.append(((r.jct - s.observed_jct_s) / s.observed_jct_s, s, r))
    mags = [abs(e) for e, _, _ in errs]
    worst_e, worst_s, worst_r = max(errs, key=lambda x: abs(x[0]))
    observed = statistics.fmean(s.observed_jct_s for s in selection.apps)
    replayed = statistics.fmean(r.jct for r in result.apps)
    return {
        "policy": result.policy,
        "apps": len(errs),
        "median_abs_rel_error": statistics.median(mags),
        "p90_abs_rel_error": percentile(mags, 90),
        "worst_abs_rel_error": abs(worst_e),
        "worst_app": {"id": worst_s.app.id, "name": worst_s.app.name,
                      "observed_jct_hours": _hours(worst_s.observed_jct_s),
                      "replay_jct_hours": _hours(worst_r.jct), "rel_error": worst_e},
        "within_10pct": sum(1 for m in mags if m <= 0.10) / len(mags),
        "observed_avg_jct_hours": _hours(observed),
        "replay_avg_jct_hours": _hours(replayed),
        "avg_jct_rel_error": (replayed - observed) / observed,
    }


def worst_apps(rows: Sequence[Mapping[str, Any]], policy: str, n: int) -> list[dict[str, Any]]:
    """The ``n`` apps with the highest rho under ``policy`` (ties by id)."""
    ranked = sorted(rows, key=lambda r: (-r["replay"][policy]["rho"], r["id"]))[:n]
    return [{"id": r["id"], "name": r["name"], "user": r["user"], "queue": r["queue"],
             "gpus": r["gpus"], "observed_jct_hours": r["observed_jct_hours"],
             **{f"rho_{p}": v["rho"] for p, v in r["replay"].items()},
             **{f"jct_hours_{p}": v["jct_hours"] for p, v in r["replay"].items()}}
            for r in ranked]


def build_summary(selection: Selection, results: Mapping[str, SimResult], *, current: str,
                  rows: Sequence[Mapping[str, Any]], worst: int,
                  context: Mapping[str, Any]) -> dict[str, Any]:
    """summary.json (see docs/preview.md, "Outputs"); ``context`` adds the source, cluster,
    current policy, settings and timings as given."""
    inferred: dict[str, int] = {}
    for s in selection.apps:
        for f in s.inferred:
            inferred[f] = inferred.get(f, 0) + 1
    apps = selection.apps
    first = min(s.app.started_ms for s in apps)
    last = max(s.app.finished_ms for s in apps)
    return {
        **context,
        "apps": {
            "read": selection.read,
            "replayed": len(apps),
            "left_out": {k: selection.left_out.get(k, 0) for k in REASONS},
            "inferred": inferred,
            "with_job_records": sum(s.records is not None for s in apps),
            "first_started": _iso(first),
            "last_finished": _iso(last),
        },
        "observed": {
            "avg_jct_hours": _hours(statistics.fmean(s.observed_jct_s for s in apps)),
            "gpu_time_hours": _hours(sum(s.gpu_seconds for s in apps)),
            "makespan_hours": _hours((last - first) / 1000),
        },
        "policies": {p: summarize(r) for p, r in results.items()},
        "calibration": calibration(selection, results[current]),
        "worst_apps": {p: worst_apps(rows, p, worst) for p in results},
    }


# ------------------------------------------------------------------------------ plots


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    text = buf.getvalue()
    return text[text.find("<svg"):]


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width)) or text


def _cdf_points(values: Sequence[float]) -> tuple[list[float], list[float]]:
    xs = sorted(values)
    n = len(xs)
    if n <= CDF_POINTS:
        return xs, [(i + 1) / n for i in range(n)]
    idx = sorted({round(k * (n - 1) / (CDF_POINTS - 1)) for k in range(CDF_POINTS)})
    return [xs[i] for i in idx], [(i + 1) / n for i in idx]


def plots(results: Mapping[str, SimResult], selection: Selection, current: str,
          title: str) -> dict[str, str]:
    """Inline SVG plots: the rho CDF per policy, the JCT CDF (observed and replayed) and the
    calibration scatter (observed vs replayed JCT under the current policy)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: dict[str, str] = {}
    style: dict[str, Any] = {"svg.fonttype": "none", "svg.hashsalt": "themis-preview",
                             "font.size": 9}
    with plt.rc_context(style):  # type: ignore[arg-type]
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for name, r in results.items():
            xs, ys = _cdf_points([a.rho for a in r.apps])
            ax.step(xs, ys, where="post", label=name)
        ax.set_xscale("log")
        ax.axvline(1.0, color="grey", lw=0.6, ls="--")
        ax.set_xlabel("finish-time fairness rho = JCT / T_id (log scale; <= 1: no worse "
                      "than a 1/N share)")
        ax.set_ylabel("fraction of apps (CDF)")
        ax.set_title(f"rho per app under each policy\n{_wrap(title, 90)}", fontsize=9)
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        out["rho_cdf"] = _svg(fig)
        plt.close(fig)

        fig, ax = plt.subplots(figsize=(7, 4.2))
        xs, ys = _cdf_points([_hours(s.observed_jct_s) for s in selection.apps])
        ax.step(xs, ys, where="post", label="observed", color="black")
        for name, r in results.items():
            xs, ys = _cdf_points([_hours(a.jct) for a in r.apps])
            ax.step(xs, ys, where="post", label=f"replay: {name}")
        ax.set_xscale("log")
        ax.set_xlabel("job completion time JCT = finish - submission (hours, log scale)")
        ax.set_ylabel("fraction of apps (CDF)")
        ax.set_title(f"JCT per app, observed and replayed\n{_wrap(title, 90)}", fontsize=9)
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        out["jct_cdf"] = _svg(fig)
        plt.close(fig)

        fig, ax = plt.subplots(figsize=(5.2, 5))
        by_id = {a.id: a for a in results[current].apps}
        obs = [_hours(s.observed_jct_s) for s in selection.apps]
        rep = [_hours(by_id[s.app.id].jct) for s in selection.apps]
        ax.scatter(obs, rep, s=6, alpha=0.5, rasterized=len(obs) > 500)
        lo = min(min(obs), min(rep))
        hi = max(max(obs), max(rep))
        ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8, ls="--", label="replay = observed")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("observed JCT (hours, log scale)")
        ax.set_ylabel(f"replayed JCT under {current} (hours, log scale)")
        ax.set_title(f"Calibration: observed vs replayed JCT, one dot per app\n"
                     f"{_wrap(title, 66)}", fontsize=9)
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        out["calibration"] = _svg(fig)
        plt.close(fig)
    return out


# ------------------------------------------------------------------------------- HTML

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1100px;
color:#222;line-height:1.45;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px
solid #ddd}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}
th,td{border:1px solid #ddd;padding:.25em .6em;text-align:right}
th{background:#f4f4f4}td.l,th.l{text-align:left}
.note{color:#555;font-size:.9em}.flag{color:#a60}
.verdict{background:#f6f9ff;border:1px solid #cfe0ff;padding:.6em 1em}
figure{margin:1em 0}svg{max-width:100%;height:auto}
details summary{cursor:pointer;font-weight:600}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _f(x: float, digits: int = 2) -> str:
    if isinstance(x, float) and not math.isfinite(x):
        return "-"
    return f"{x:,.{digits}f}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    """An HTML table; the first ``left`` columns are left-aligned text (already escaped)."""
    th = "".join(f'<th class="{"l" if i < left else ""}">{h}</th>' for i, h in enumerate(head))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{c}</td>'
                         for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def render_html(summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
                figures: Mapping[str, str], title: str) -> str:
    pol = summary["policies"]
    cur = summary["current"]["policy"]
    names = list(pol)
    obs = summary["observed"]
    apps = summary["apps"]
    cal = summary["calibration"]
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>Themis preview: {_e(title)}</title><style>{CSS}</style></head><body>"]
    parts.append(f"<h1>Themis preview</h1><p class=\"note\">{_e(title)}<br>generated "
                 f"{_e(summary['generated_at'])} by themis {_e(summary['version'])}</p>")

    th = pol.get("themis")
    if th is not None:
        c = pol[cur]
        parts.append(
            "<div class=\"verdict\"><b>In short.</b> Replaying this cluster's "
            f"{apps['replayed']:,} GPU apps, the worst app's rho is {_f(c['max_rho'])} under "
            f"the current policy ({_e(cur)}) and {_f(th['max_rho'])} under Themis; the "
            f"share of apps with rho &gt; 1 is {_pct(c['frac_rho_gt_1'])} and "
            f"{_pct(th['frac_rho_gt_1'])}; the average JCT is {_f(c['avg_jct_hours'])} h and "
            f"{_f(th['avg_jct_hours'])} h. The replay of the current policy is "
            f"{_pct(cal['median_abs_rel_error'])} off the observed JCT for the median app "
            "(Calibration below): read the comparison with that margin.</div>")

    parts.append("<h2>Policies compared</h2>")
    head = ["policy", "apps", "max rho", "p99 rho", "median rho", "apps rho &gt; 1",
            "GPU time (GPU-h)", "avg JCT (h)", "makespan (h)", "restarts"]
    table = [[_e(n), f"{p['apps']:,}", _f(p["max_rho"]), _f(p["p99_rho"]),
              _f(p["median_rho"]), _pct(p["frac_rho_gt_1"]), _f(p["gpu_time_hours"], 0),
              _f(p["avg_jct_hours"]), _f(p["makespan_hours"], 1), f"{p['restarts']:,}"]
             for n, p in pol.items()]
    table.append(["observed (the cluster's history)", f"{apps['replayed']:,}", "-", "-",
                  "-", "-", _f(obs["gpu_time_hours"], 0), _f(obs["avg_jct_hours"]),
                  _f(obs["makespan_hours"], 1), "-"])
    parts.append(_table(head, table))
    parts.append(
        "<p class=\"note\">rho = JCT / T_id, T_id the app's run time on an independent "
        "1/N_avg share of the cluster, N_avg the average number of apps present during its "
        "life (finish-time fairness, Themis section 3.2); rho &gt; 1: the app did worse "
        "than with its own share. GPU time counts every GPU held, restart pauses included. "
        f"The current policy is {_e(cur)} ({_e(summary['current']['scheduler'])} scheduler,"
        f" from {_e(summary['current']['source'])}).</p>")
    parts.append(f"<figure>{figures['rho_cdf']}</figure>")
    parts.append(f"<figure>{figures['jct_cdf']}</figure>")

    parts.append("<h2>The worst apps</h2>")
    for n in names:
        worst = summary["worst_apps"][n]
        head = ["app", "name", "user", "queue", "GPUs",
                *[f"rho {_e(m)}" for m in names], *[f"JCT {_e(m)} (h)" for m in names],
                "observed JCT (h)"]
        table = [[_e(w["id"]), _e(w["name"]), _e(w["user"]), _e(w["queue"]), str(w["gpus"]),
                  *[_f(w[f"rho_{m}"]) for m in names],
                  *[_f(w[f"jct_hours_{m}"]) for m in names], _f(w["observed_jct_hours"])]
                 for w in worst]
        parts.append(f"<p><b>Highest rho under {_e(n)}</b></p>" + _table(head, table, left=4))

    parts.append("<h2>Calibration: the replay of today's policy against what happened</h2>")
    w = cal["worst_app"]
    parts.append(_table(["", "value"], [
        ["apps", f"{cal['apps']:,}"],
        ["median |relative error| of JCT", _pct(cal["median_abs_rel_error"])],
        ["90th percentile |relative error|", _pct(cal["p90_abs_rel_error"])],
        ["apps within 10 %", _pct(cal["within_10pct"])],
        ["worst |relative error|", f"{_pct(cal['worst_abs_rel_error'])} ({_e(w['id'])} "
                                   f"{_e(w['name'])}: observed {_f(w['observed_jct_hours'])} h,"
                                   f" replayed {_f(w['replay_jct_hours'])} h)"],
        ["average JCT observed / replayed", f"{_f(cal['observed_avg_jct_hours'])} h / "
                                            f"{_f(cal['replay_avg_jct_hours'])} h "
                                            f"({cal['avg_jct_rel_error']:+.1%})"],
    ]))
    parts.append(
        f"<p class=\"note\">Relative error = (replayed JCT under {_e(cur)} - observed JCT) / "
        "observed JCT. The replay knows each app's GPU work and inferred demand only: no "
        "queue capacities, no other resources (memory, CPU), no failures or retries, and "
        "every job pays the restart pause when it starts.</p>")
    parts.append(f"<figure>{figures['calibration']}</figure>")

    parts.append("<h2>What was read, inferred and left out</h2>")
    parts.append(_table(["field", "how", "from"],
                        [[_e(a), _e(b), _e(c)] for a, b, c in FIELDS], left=3))
    inf = apps["inferred"]
    parts.append(f"<p>{apps['read']:,} apps read, {apps['replayed']:,} replayed "
                 f"(GPU demand inferred for {inf.get('gpus', 0):,}; capped at the cluster's "
                 f"size for {inf.get('gpus_capped', 0):,}). Themis apps replayed with their "
                 f"jobs from their job records: {apps['with_job_records']:,}"
                 + _records_text(summary["source"].get("job_records")) + ". Left out:</p>")
    parts.append(_table(["reason", "apps"],
                        [[_e(REASON_TEXT[k]), f"{v:,}"] for k, v in apps["left_out"].items()]))

    cl = summary["cluster"]
    cfg = summary["config"]
    parts.append("<h2>Settings</h2>")
    parts.append(_table(["", "value"], [
        ["apps from", _e(summary["source"]["apps"])],
        ["states, window", _e(f"{','.join(summary['source']['states'])}; "
                              f"{summary['source']['window_text']}")],
        ["cluster", _e(f"{cl['gpus']} GPUs on {cl['nodes']} nodes (from {cl['source']})")],
        ["current policy", _e(f"{cur} ({summary['current']['scheduler']} scheduler)")],
        ["Themis", _e(f"policy themis, f = {cfg['fairness_knob']}")],
        ["leases, restart pause", _e(f"{cfg['lease_minutes']} min, "
                                     f"{cfg['restart_seconds']} s (both policies)")],
        ["lease ends", _e(f"at multiples of {cfg['expiry_quantum_seconds']:g} s "
                          "(the replay's expiry quantum)")],
        ["seed", _e(cfg["seed"])],
    ], left=2))

    parts.append("<h2>Every app</h2><details><summary>"
                  f"{len(rows):,} apps (also in apps.json)</summary>")
    head = ["app", "name", "user", "queue", "state", "GPUs", "GPU-h", "observed JCT (h)",
            *[f"JCT {_e(m)} (h)" for m in names], *[f"rho {_e(m)}" for m in names]]
    table = []
    for r in rows:
        gpus = str(r["gpus"])
        if {"gpus", "gpus_capped"} & set(r["inferred"]):
            gpus = (f'<span class="flag" title="inferred: {_e(", ".join(r["inferred"]))}">'
                    f'{gpus}{"&dagger;" if "gpus_capped" in r["inferred"] else "*"}</span>')
        table.append([_e(r["id"]), _e(r["name"]), _e(r["user"]), _e(r["queue"]),
                      _e(r["state"]), gpus, _f(r["gpu_hours"]), _f(r["observed_jct_hours"]),
                      *[_f(r["replay"][m]["jct_hours"]) for m in names],
                      *[_f(r["replay"][m]["rho"]) for m in names]])
    parts.append(_table(head, table, left=5))
    parts.append("<p class=\"note\">* inferred GPU demand; &dagger; inferred and capped at "
                 "the cluster's GPUs.</p></details></body></html>")
    return "\n".join(parts)


def _records_text(found: Mapping[str, Any] | None) -> str:
    """How the Themis apps' job records fared, for the report's text."""
    if not found or not found.get("from"):
        return " (job records not read)"
    missed = [f"{found[k]:,} {k}" for k in ("absent", "unreadable", "unusable") if found.get(k)]
    return f" (from {found['from']}" + (f"; {', '.join(missed)}" if missed else "") + ")"


def output_paths(out: Path) -> dict[str, Path]:
    return {"report": out / "report.html", "summary": out / "summary.json",
            "apps": out / "apps.json"}


def write(out: Path, summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
          page: str) -> dict[str, Path]:
    """report.html (``page``, from :func:`render_html`), summary.json and apps.json in
    ``out`` (created if missing)."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    paths = output_paths(out)
    paths["report"].write_text(page, encoding="utf-8")
    paths["summary"].write_text(json.dumps(finite(summary), indent=2, allow_nan=False,
                                           default=_json_default), encoding="utf-8")
    paths["apps"].write_text(json.dumps(finite(list(rows)), allow_nan=False,
                                        default=_json_default), encoding="utf-8")
    return paths


def _json_default(x: Any) -> Any:
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def finite(doc: Any) -> Any:
    """``doc`` with every NaN or infinite number replaced by None (strict JSON)."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {k: finite(v) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [finite(v) for v in doc]
    return doc
