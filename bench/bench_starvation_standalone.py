"""The filter's order of starving apps in real ``themis standalone`` runs: the same app mix
run once per order on the same emulated GPUs (``--modes``, default all three):
``--starvation inf`` (the paper's reading: apps holding no GPU tie at rho = +inf and a
draw decides), ``served-now`` (they rank above every app holding GPUs, the worst off
first) and ``ranked`` (the default: each that held GPUs before ranks among all apps by the
rho it would have if served now, newcomers first); the last two keep at most one starving
bidder per free GPU
(docs/mechanism.md, "Starvation").

The mix: six Hyperband apps of the bundled job (``python -m themis.jobs.train``, real
TensorFlow processes, emulated GPU speed) of different sizes - one bracket each, R = 2 / eta
= 2 (two configurations, the better one continued to twice the steps on up to 2 GPUs) or
R = 3 / eta = 3 (three, the best continued to 3x) - with 15 to 72 s of GPU time each at
``--scale 1``, submitted at 0, 0, 15, 30, 45 and 60 s (the spec's ``standalone.submit_at_s``)
on ``--machines`` x ``--gpus-per-machine`` GPUs (default 2 x 2) with ``--lease-s`` leases.
All runs get the same spec files, cluster, lease, fairness knob and arbiter seed; they
differ only in ``--starvation``. Real runs are not repeatable to the second (TensorFlow
start-up, the other load on the machine), so one set of runs is one sample.

Per app: the final rho (the agent's live rho in its last sample before completion, i.e.
Eq. 1/2 with almost nothing left to run: the app's finish-time fairness as the mechanism
computes it), JCT, GPU time (leased GPU-seconds and GPU-seconds of job processes) and the
time it held no GPU after its submission. Per run: max, p99 (linear interpolation over the
apps: with six apps close to the max) and mean of the final rho, the share of apps with
rho > 1.05, makespan, rounds, GPU moves, rounds at which 2+ apps held no GPU, and the
1-minute load average before and after. Then each order over the first (the baseline).
Tables and progress go to stderr; one JSON document to stdout.

    python bench/bench_starvation_standalone.py
    python bench/bench_starvation_standalone.py --scale 2 --lease-s 60 --out /tmp/starve
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from themis.am.launchers.local.spec import DEFAULT_SPACE  # noqa: E402
from themis.sim.metrics import percentile  # noqa: E402
from themis.standalone.report import held_at  # noqa: E402

MODES = ("inf", "served-now", "ranked")  # every starvation order; the first is the baseline
UNFAIR = 1.05  # an app is counted unfair above this final rho


@dataclass(frozen=True)
class MixApp:
    name: str
    max_resource: int
    eta: int
    steps_per_unit: int
    step_time_ms: float
    gpus: int
    submit_at_s: float

    def gpu_seconds(self, scale: float) -> float:
        """Emulated GPU time of the plan (bracket s = 1: eta configurations for one unit,
        the best continued to max_resource units)."""
        spu = max(1, round(self.steps_per_unit * scale))
        steps = self.eta * spu + (self.max_resource - 1) * spu
        return steps * self.step_time_ms / 1000.0


#: the app mix: different sizes, staggered arrivals (GPU time at --scale 1 in the comment)
MIX: tuple[MixApp, ...] = (
    MixApp("big-a", 2, 2, 60, 400.0, 2, 0.0),      # 72 s
    MixApp("big-b", 3, 3, 25, 400.0, 2, 0.0),      # 50 s, three configurations
    MixApp("mid-a", 2, 2, 50, 300.0, 2, 15.0),     # 45 s
    MixApp("mid-b", 2, 2, 40, 300.0, 2, 30.0),     # 36 s
    MixApp("small-a", 2, 2, 30, 200.0, 1, 45.0),   # 18 s, one GPU per job
    MixApp("small-b", 2, 2, 25, 200.0, 2, 60.0),   # 15 s
)


def spec_of(app: MixApp, scale: float, stagger_scale: float, seed: int) -> dict[str, Any]:
    """The app's spec (docs/standalone.md, "Cluster and app specs")."""
    spu = max(1, round(app.steps_per_unit * scale))
    return {
        "name": app.name,
        "search_space": DEFAULT_SPACE,
        "hyperband": {"max_resource": app.max_resource, "eta": app.eta, "brackets": [1],
                      "steps_per_unit": spu, "seed": seed},
        "job": {"args": {"step_time_ms": app.step_time_ms, "batch_size": 32,
                         "num_layers": 1, "checkpoint_every": max(1, spu // 4)}},
        "resources": {"gpus": app.gpus},
        "standalone": {"submit_at_s": app.submit_at_s * stagger_scale},
    }


def loadavg() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return math.nan


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ one run
def run_standalone(mode: str, specs: Sequence[Path], out: Path, args: argparse.Namespace
                   ) -> dict[str, Any]:
    """One ``themis standalone`` run; returns its report.json plus the bench's notes."""
    cmd = [sys.executable, "-m", "themis.cli", "standalone", "--out", str(out / "run"),
           "--display", "lines", "--refresh-s", "15", "--no-plot",
           "--machines", str(args.machines), "--gpus-per-machine", str(args.gpus_per_machine),
           "--lease-s", f"{args.lease_s:g}", "--fairness-knob", f"{args.fairness_knob:g}",
           "--seed", str(args.seed), "--starvation", mode,
           "--timeout-s", f"{args.timeout_s:g}"]
    for s in specs:
        cmd += ["--app", str(s)]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    out.mkdir(parents=True, exist_ok=True)
    driver_log = out / "driver.log"
    load_before = loadavg()
    t0 = time.monotonic()
    done: list[str] = []
    with driver_log.open("w", encoding="utf-8") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env,
                                cwd=REPO)
        last = t0
        try:
            while proc.poll() is None:
                time.sleep(1.0)
                text = driver_log.read_text(encoding="utf-8", errors="replace")
                for line in text.splitlines():
                    if ": DONE in " in line or ": FAILED" in line:
                        name = line.split(":")[0].split()[-1]
                        if name not in done:
                            done.append(name)
                            log(f"  [{mode}] {time.monotonic() - t0:5.0f} s  {line.strip()}")
                if time.monotonic() - last >= args.progress_s:
                    last = time.monotonic()
                    log(f"  [{mode}] {last - t0:5.0f} s  {len(done)}/{len(specs)} apps done, "
                        f"load {loadavg():.2f}")
        except KeyboardInterrupt:
            proc.send_signal(2)  # the driver stops cleanly (jobs checkpoint)
            proc.wait(timeout=args.timeout_s)
            raise
    wall = time.monotonic() - t0
    load_after = loadavg()
    report_path = out / "run" / "report.json"
    if not report_path.is_file():
        raise SystemExit(f"{mode}: no report.json (driver exit {proc.returncode}); see "
                         f"{driver_log}")
    report: dict[str, Any] = json.loads(report_path.read_text(encoding="utf-8"))
    if report["config"]["starvation"] != mode:
        raise SystemExit(f"{mode}: the report says starvation = "
                         f"{report['config']['starvation']!r}")
    report["_bench"] = {"exit_status": proc.returncode, "wall_s": round(wall, 1),
                        "load_before": load_before, "load_after": load_after,
                        "command": cmd}
    return report


# ------------------------------------------------------------------ metrics
def starving_s(app: Mapping[str, Any]) -> float | None:
    """Seconds between submission and completion during which the app held no GPU."""
    start, end = app["submit_s"], app["completion_s"]
    if start is None or end is None:
        return None
    total, t, n = 0.0, start, 0
    for at, gpus in app["held"]:
        at = min(max(at, start), end)
        if n == 0:
            total += at - t
        t, n = at, len(gpus)
    if n == 0:
        total += end - t
    return total


def final_rho(app: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """(the live rho of the app's last sample, seconds from that sample to completion)."""
    for t, rho, _reported, _gpus, _running in reversed(app["rho"]):
        if rho is not None:
            end = app["completion_s"]
            return rho, (None if end is None else round(end - t, 2))
    return None, None


def contended_rounds(report: Mapping[str, Any]) -> int:
    """Rounds at which 2+ submitted, unfinished apps held no GPU."""
    n = 0
    for r in report["rounds"]:
        t = r["t"]
        starving = 0
        for a in report["apps"].values():
            sub, end = a["submit_s"], a["completion_s"]
            if sub is None or t < sub or (end is not None and t >= end):
                continue
            if held_at(a, t - 1e-6) == 0:
                starving += 1
        n += starving >= 2
    return n


def summarize(report: Mapping[str, Any]) -> dict[str, Any]:
    apps: dict[str, Any] = {}
    for name, a in report["apps"].items():
        rho, gap = final_rho(a)
        wait = starving_s(a)
        apps[name] = {
            "completed": a["completed"], "submit_s": a["submit_s"],
            "completion_s": a["completion_s"], "jct_s": a["jct_s"],
            "final_rho": rho, "final_rho_sample_before_end_s": gap,
            "final_rho_reported": a.get("final_rho_reported"),
            "gpu_seconds_leased": a["gpu_seconds_leased"],
            "gpu_seconds_jobs": a["gpu_seconds_jobs"],
            "no_gpu_s": None if wait is None else round(wait, 1),
        }
    rhos = [v["final_rho"] for v in apps.values() if v["final_rho"] is not None]
    jcts = [v["jct_s"] for v in apps.values() if v["jct_s"] is not None]
    waits = [v["no_gpu_s"] for v in apps.values() if v["no_gpu_s"] is not None]
    ends = [v["completion_s"] for v in apps.values() if v["completion_s"] is not None]
    b = report["_bench"]
    return {
        "status": report["status"], "exit_status": b["exit_status"], "wall_s": b["wall_s"],
        "load_before": b["load_before"], "load_after": b["load_after"],
        "apps_completed": sum(1 for v in apps.values() if v["completed"]),
        "rho_max": max(rhos, default=None),
        "rho_p99": round(percentile(rhos, 99), 4) if rhos else None,
        "rho_mean": round(sum(rhos) / len(rhos), 4) if rhos else None,
        "share_rho_gt_1_05": (round(sum(r > UNFAIR for r in rhos) / len(rhos), 4)
                              if rhos else None),
        "jct_mean_s": round(sum(jcts) / len(jcts), 1) if jcts else None,
        "makespan_s": max(ends, default=None),
        "no_gpu_mean_s": round(sum(waits) / len(waits), 1) if waits else None,
        "no_gpu_max_s": max(waits, default=None),
        "gpu_seconds_leased": round(sum(v["gpu_seconds_leased"] for v in apps.values()), 1),
        "gpu_seconds_jobs": round(sum(v["gpu_seconds_jobs"] for v in apps.values()), 1),
        "rounds": len(report["rounds"]),
        "rounds_2plus_starving": contended_rounds(report),
        "gpu_moves": len(report["moves"]),
        "gpu_moves_at_lease_expiry": sum(1 for m in report["moves"] if m["at_lease_expiry"]),
        "resumes": len(report["resumes"]),
        "apps": apps,
    }


RATIO_KEYS = ("rho_max", "rho_p99", "rho_mean", "share_rho_gt_1_05", "jct_mean_s",
              "makespan_s", "no_gpu_mean_s", "no_gpu_max_s", "gpu_seconds_jobs")


def ratios(new: Mapping[str, Any], old: Mapping[str, Any]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for k in RATIO_KEYS:
        a, b = new.get(k), old.get(k)
        out[k] = round(a / b, 3) if a is not None and b not in (None, 0) else None
    return out


# ------------------------------------------------------------------ tables
def _f(x: Any, nd: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def tables(runs: Mapping[str, Mapping[str, Any]],
           ratio: Mapping[str, Mapping[str, float | None]]) -> str:
    lines = ["", "per app (final rho = the agent's live rho at completion)", ""]
    head = f"{'app':<9}" + "".join(
        f" | {m + ' rho':>14} {'JCT s':>6} {'GPU-s':>6} {'no-GPU s':>8}" for m in runs)
    lines += [head, "-" * len(head)]
    names = list(next(iter(runs.values()))["apps"])
    for n in names:
        row = f"{n:<9}"
        for s in runs.values():
            a = s["apps"][n]
            row += (f" | {_f(a['final_rho'], 3):>14} {_f(a['jct_s'], 0):>6} "
                    f"{_f(a['gpu_seconds_jobs'], 0):>6} {_f(a['no_gpu_s'], 0):>8}")
        lines.append(row)
    lines += ["", "per run", ""]
    keys = ("status", "apps_completed", "rho_max", "rho_p99", "rho_mean",
            "share_rho_gt_1_05", "jct_mean_s", "makespan_s", "no_gpu_mean_s", "no_gpu_max_s",
            "gpu_seconds_leased", "gpu_seconds_jobs", "rounds", "rounds_2plus_starving",
            "gpu_moves", "gpu_moves_at_lease_expiry", "resumes", "wall_s", "load_before",
            "load_after")
    base = next(iter(runs))
    head = f"{'':<26}" + "".join(f" {m:>12}" for m in runs) + "".join(
        f" {m + '/' + base:>18}" for m in ratio)
    lines += [head, "-" * len(head)]
    for k in keys:
        row = f"{k:<26}" + "".join(f" {_f(s.get(k), 3):>12}" for s in runs.values())
        row += "".join(f" {_f(r.get(k), 3):>18}" for r in ratio.values() if k in r)
        lines.append(row)
    return "\n".join(lines)


# ------------------------------------------------------------------ main
class _Help(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's line breaks; appends "(default: X)" to every option with a
    default other than None (whose help says what happens without it)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.option_strings and action.default not in (None, argparse.SUPPRESS):
            text += " (default: %(default)s)"
        return text


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=_Help)
    ap.add_argument("--machines", type=int, default=2, help="emulated machines")
    ap.add_argument("--gpus-per-machine", type=int, default=2, help="emulated GPUs each")
    ap.add_argument("--lease-s", type=float, default=40.0,
                    help="GPU lease length, s (TensorFlow takes 7-25 s to start on 2 cores)")
    ap.add_argument("--fairness-knob", type=float, default=0.8, help="f of both runs")
    ap.add_argument("--seed", type=int, default=0,
                    help="the arbiter's seed (filter draw, leftover lottery), both runs")
    ap.add_argument("--app-seed", type=int, default=1,
                    help="Hyperband configuration sampling seed of every app")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiplies every app's steps per unit (the work)")
    ap.add_argument("--stagger-scale", type=float, default=1.0,
                    help="multiplies every app's submission time (0: all at once)")
    ap.add_argument("--modes", default=",".join(MODES),
                    help="comma-separated starvation orders to run, in this order; the "
                    "first is the baseline of the ratios")
    ap.add_argument("--timeout-s", type=float, default=600.0,
                    help="per run: the driver stops cleanly after this long (exit 1)")
    ap.add_argument("--progress-s", type=float, default=30.0,
                    help="a progress line on stderr this often")
    ap.add_argument("--out", type=Path, default=None,
                    help="keep the spec files, the runs' output and driver logs here "
                         "(default: a temporary directory, removed at the end)")
    args = ap.parse_args(argv)
    if args.machines < 1 or args.gpus_per_machine < 1 or args.lease_s <= 0 \
            or args.scale <= 0 or args.stagger_scale < 0 or not 0 <= args.fairness_knob < 1:
        ap.error("sizes, --lease-s and --scale must be > 0, --stagger-scale >= 0, "
                 "--fairness-knob in [0, 1)")
    order = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if len(order) < 2 or len(set(order)) != len(order) or not set(order) <= set(MODES):
        ap.error(f"--modes: two or more distinct orders of {', '.join(MODES)}")
    with tempfile.TemporaryDirectory(prefix="starve-bench-") as tmp:
        root = args.out if args.out is not None else Path(tmp)
        if (root / "specs").exists() or any((root / m).exists() for m in MODES):
            ap.error(f"--out {root} already holds a run: use a new directory")
        spec_dir = root / "specs"
        spec_dir.mkdir(parents=True)
        specs = []
        for app in MIX:
            path = spec_dir / f"{app.name}.json"
            path.write_text(json.dumps(spec_of(app, args.scale, args.stagger_scale,
                                               args.app_seed), indent=1), encoding="utf-8")
            specs.append(path)
        gpus = args.machines * args.gpus_per_machine
        work = sum(a.gpu_seconds(args.scale) for a in MIX)
        log(f"{len(MIX)} apps, {work:.0f} s of emulated GPU time in all, on {gpus} GPUs "
            f"({args.machines} x {args.gpus_per_machine}), {args.lease_s:g} s leases, "
            f"f = {args.fairness_knob:g}, seed {args.seed}; runs: {', '.join(order)}")
        runs: dict[str, dict[str, Any]] = {}
        for i, mode in enumerate(order):
            log(f"run {i + 1}/{len(order)}: --starvation {mode} (load {loadavg():.2f})")
            report = run_standalone(mode, specs, root / mode, args)
            runs[mode] = summarize(report)
            s = runs[mode]
            log(f"  [{mode}] {s['status']} in {s['wall_s']:.0f} s: max rho {_f(s['rho_max'], 3)},"
                f" mean {_f(s['rho_mean'], 3)}, {s['rounds']} rounds, {s['gpu_moves']} moves")
        summaries = {m: runs[m] for m in order}
        ratio = {m: ratios(summaries[m], summaries[order[0]]) for m in order[1:]}
        log(tables(summaries, ratio))
        doc = {
            "bench": "starvation_standalone",
            "config": {"machines": args.machines, "gpus_per_machine": args.gpus_per_machine,
                       "gpus": gpus, "lease_s": args.lease_s,
                       "fairness_knob": args.fairness_knob, "seed": args.seed,
                       "app_seed": args.app_seed, "scale": args.scale,
                       "stagger_scale": args.stagger_scale, "order": list(order),
                       "unfair_above": UNFAIR, "emulated_gpu_seconds": round(work, 1),
                       "apps": [spec_of(a, args.scale, args.stagger_scale, args.app_seed)
                                for a in MIX]},
            "runs": summaries,
            "ratios_over_baseline": ratio,
        }
        print(json.dumps(doc, indent=1))
    return 0 if all(s["status"] == "completed" for s in summaries.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
