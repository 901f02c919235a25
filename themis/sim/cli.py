"""``themis sim``: run policies on a trace and write DIR/summary.json plus plots.

``themis sim --help`` documents every option and its default; the summary records the
trace conversions applied (themis.sim.loader) and the run's configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from themis.mechanism.fairness import (
    DEFAULT_IDEAL_TIME,
    DEFAULT_STARVATION,
    IDEAL_TIME_NAMES,
    parse_ideal_time,
)
from themis.mechanism.round import DEFAULT_FAIRNESS_KNOB, lease_spread
from themis.mechanism.solvers import DEFAULT_SOLVER, SOLVER_NAMES, SolverError
from themis.mechanism.topology import Topology
from themis.sim.cluster import load_cluster
from themis.sim.engine import SimConfig, SimResult, Simulator, run_with_progress
from themis.sim.errors import SimError
from themis.sim.loader import TraceOptions, load_any
from themis.sim.metrics import per_app, summarize
from themis.sim.policies import POLICY_NAMES, Policy, make_policy
from themis.sim.policies.themis import ThemisPolicy
from themis.sim.workload import Workload
from themis.stdio import stdout_to_stderr

DEFAULT_POLICIES = "themis,gandiva,tiresias,optimus,slaq,srtf,srsf"
DESCRIPTION = """\
Event-driven simulation of Themis and baseline policies on a trace (paper section 6):
each policy replays the same workload on the same simulated cluster. Writes
OUT/summary.json ({"trace": conversions applied, "config": this run's settings,
"policies": {name: metrics}}), OUT/apps.json (per-app rows) and plots, and prints one
line per policy. rho is finish-time fairness (docs/simulator.md, "Metrics"): the
summary reports it with both forms of the ideal time and Gavel's isolated-share rho,
with rho_floor and excess rho.

A philly-gavel trace (a directory of *.trace files or one file) is converted into apps
with the trace options below, each stated with its default; nothing else is changed
unless asked (--workload 2, --max-apps). The 'builtin' trace is a converted workload
(Philly seed 0, first 14 days, jobs capped at 48 h, 24-h groups; recorded in it).

Exit status: 0 done; 1 a policy beat the --bound (a defect); 2 bad options, unknown
policy, malformed trace or cluster spec."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "sim",
        help="simulate scheduling policies on a trace",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configure(p)
    p.set_defaults(func=run_cli)
    return p


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--trace",
        default="builtin",
        metavar="PATH",
        help="a philly-gavel trace (directory of *.trace files with "
        "simulation_throughputs.json next to it or above, or one .trace file), a converted "
        "workload (*.json, *.json.gz), or 'builtin' (default: %(default)s)",
    )
    p.add_argument(
        "--workload",
        type=int,
        default=1,
        choices=(1, 2),
        help="1: the apps as converted (paper's workload 1); 2: each app turned into a "
        "Hyperband successive-halving app with 2x the trace's GPU demand per job (paper's "
        "workload 2, themis.sim.hyperband) (default: %(default)s)",
    )
    t = p.add_argument_group(
        "trace conversions (philly-gavel .trace input only; a converted workload records "
        "its own)"
    )
    t.add_argument(
        "--group-window-hours",
        type=_nonneg_float,
        default=None,
        metavar="H",
        help="jobs of one model family in one VC arriving within H hours of the group's "
        "first job form one app (at most 100 jobs); 0: every job is its own app "
        "(default: 24)",
    )
    t.add_argument(
        "--days",
        type=_nonneg_float,
        default=None,
        metavar="D",
        help="keep only the jobs arriving in the first D days; 0: all (default: 0)",
    )
    t.add_argument(
        "--max-job-hours",
        type=_nonneg_float,
        default=None,
        metavar="H",
        help="shorten jobs longer than H hours on their own GPUs to H hours; 0: keep "
        "every length (default: 0)",
    )
    p.add_argument(
        "--max-apps",
        type=int,
        default=0,
        metavar="N",
        help="simulate only the first N apps by arrival; 0: all (default: %(default)s)",
    )
    p.add_argument(
        "--policies",
        default=DEFAULT_POLICIES,
        help=f"comma-separated policies, from: {', '.join(POLICY_NAMES)} "
        "(default: %(default)s)",
    )
    p.add_argument("--out", required=True, type=Path, metavar="DIR",
                   help="output directory, created if missing (required)")
    p.add_argument(
        "--cluster",
        default=None,
        metavar="SPEC",
        help="'default' (the 256-GPU cluster of section 6.1), 'default:SCALE' (every "
        "machine count scaled, e.g. default:0.5 = 126 GPUs), or a cluster spec JSON/YAML "
        "file (docs/simulator.md) (default: default)",
    )
    p.add_argument(
        "--fairness-knob",
        type=float,
        default=DEFAULT_FAIRNESS_KNOB,
        metavar="F",
        help="themis: f in [0, 1), the (1-f) fraction of apps with the worst rho bid in "
        "each round (default: %(default)s)",
    )
    p.add_argument(
        "--ideal-time",
        choices=IDEAL_TIME_NAMES,
        default=str(DEFAULT_IDEAL_TIME),
        help="the ideal finish time T_id of rho, in the agents' bids and in the reported "
        "'rho': exact = the app's plan on an independent 1/N_avg share (section 3.2), "
        "paper = Eq. 2's T_cluster x N_avg; both are reported either way "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--solver",
        default=DEFAULT_SOLVER,
        help="the auction solver of the themis, themis-served-now and themis-inf policies "
        "(default "
        "%(default)s: the fast exact chain, "
        f"Gurobi when licensed; one of {', '.join(SOLVER_NAMES)}; docs/mechanism.md)",
    )
    p.add_argument("--lease-minutes", type=float, default=10.0, metavar="M",
                   help="GPU lease length in minutes (section 6.2) (default: %(default)s)")
    p.add_argument("--lease-spread-minutes", type=float, default=None, metavar="M",
                   help="the leases of one round last --lease-minutes +- M/2, spread evenly "
                   "over the round's apps, so that they do not all end in one round "
                   "(yarn-site lease-spread-ms; at most --lease-minutes; 0: all exactly "
                   "--lease-minutes, the paper's) (default: half of --lease-minutes)")
    p.add_argument(
        "--restart-seconds",
        type=float,
        default=35.0,
        metavar="S",
        help="checkpoint/restart pause of a job whose GPU set changes, in seconds "
        "(section 6.2.3's median) (default: %(default)s)",
    )
    p.add_argument(
        "--renewal-restarts",
        action="store_true",
        help="a job on a GPU whose lease ended pauses for --restart-seconds even when its "
        "app wins the GPU back in the same round, as on YARN with renew-ahead-ms=0 "
        "(docs/yarn.md, 'Renewal in place') (default: off: a lease renewed to its holder "
        "costs nothing, as with YARN's renewal in place)",
    )
    p.add_argument(
        "--expiry-quantum",
        type=float,
        default=120.0,
        metavar="S",
        help="lease expiries are rounded up to a multiple of S seconds so that leases "
        "granted close together are re-offered together (default: %(default)s)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the workload-2 transform and of the policies' random choices "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--check-invariants",
        action="store_true",
        help="check the simulator's invariants after every event (slower; default: off)",
    )
    p.add_argument(
        "--bound",
        action="store_true",
        help="also compute the lower bound on the worst app's stretch (JCT / floor) that no "
        "scheduler can beat on this trace and cluster (themis.sim.bound; docs/evaluation.md, "
        "'The yardstick'), and each policy's max stretch over it (default: off)",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a progress bar per policy on stderr, advancing with the serial GPU-hours of "
        "finished jobs (default: on)",
    )


def _nonneg_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return v


def trace_options(args: argparse.Namespace) -> TraceOptions | None:
    """The trace conversions asked for; None when none was given (a converted workload
    refuses them, a trace then gets TraceOptions' defaults)."""
    given = {k: getattr(args, k) for k in ("group_window_hours", "days", "max_job_hours")}
    if all(v is None for v in given.values()):
        return None
    return TraceOptions(**{k: v for k, v in given.items() if v is not None})


def simulate(
    args: argparse.Namespace,
) -> tuple[dict[str, SimResult], Workload, Topology]:
    names = [n.strip() for n in args.policies.split(",") if n.strip()]
    policies = [_policy(n, args) for n in names]  # validates names (and the solver) first
    topo = load_cluster(args.cluster)
    work = load_any(args.trace, args.workload, args.seed, trace_options(args))
    if args.max_apps > 0:
        conversions = work.meta["conversions"]
        work = work.head(args.max_apps)
        conversions["max_apps"] = args.max_apps
        conversions["apps"] = len(work.apps)
    if not work.apps:
        raise SimError(f"{args.trace}: no app to simulate")
    cfg = SimConfig(
        lease_s=args.lease_minutes * 60,
        restart_s=args.restart_seconds,
        seed=args.seed,
        check_invariants=args.check_invariants,
        expiry_quantum_s=args.expiry_quantum,
        renewal_restarts=args.renewal_restarts,
        ideal_time=parse_ideal_time(args.ideal_time),
        lease_spread_s=None if args.lease_spread_minutes is None
        else args.lease_spread_minutes * 60,
    )
    results: dict[str, SimResult] = {}
    for name, pol in zip(names, policies, strict=True):
        sim = Simulator(topo, work, pol, cfg)
        results[name] = _run(sim, name, args.progress)
    return results, work, topo


#: the Themis policies of the registry and the starvation order of each
THEMIS_STARVATION = {"themis": str(DEFAULT_STARVATION), "themis-served-now": "served-now",
                     "themis-inf": "inf"}


def _policy(name: str, args: argparse.Namespace) -> Policy:
    if name in THEMIS_STARVATION:  # every reading of the filter takes --solver
        starvation = THEMIS_STARVATION[name]
        return ThemisPolicy(fairness_knob=args.fairness_knob, solver=args.solver,
                            starvation=starvation)
    return make_policy(name, args.fairness_knob)


def _run(sim: Simulator, name: str, progress: bool) -> SimResult:
    return run_with_progress(sim, f"{name:>16}", progress)


def run_cli(args: argparse.Namespace) -> int:
    try:
        with stdout_to_stderr():  # stdout carries the result lines only (themis.stdio)
            results, work, topo = simulate(args)
    except (SimError, SolverError, ValueError) as exc:
        print(f"themis sim: error: {exc}", file=sys.stderr)
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    summary = {
        "trace": {"path": args.trace, **work.meta["conversions"]},
        "config": {
            "cluster": args.cluster or "default",
            "gpus": len(topo),
            "ideal_time": args.ideal_time,
            "fairness_knob": args.fairness_knob,
            "lease_minutes": args.lease_minutes,
            "lease_spread_minutes": lease_spread(args.lease_minutes, args.lease_spread_minutes),
            "restart_seconds": args.restart_seconds,
            "expiry_quantum_s": args.expiry_quantum,
            "renewal_restarts": args.renewal_restarts,
            "seed": args.seed,
        },
        "policies": {n: summarize(r) for n, r in results.items()},
    }
    if args.bound:
        try:
            summary["bound"] = run_bound(work, topo, args.restart_seconds,
                                         summary["policies"])
        except SimError as exc:
            print(f"themis sim: error: {exc}", file=sys.stderr)
            return 1
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True))
    (out / "apps.json").write_text(json.dumps({n: per_app(r) for n, r in results.items()}))
    from themis.sim.plots import write_plots

    title = f"{args.trace}, workload {args.workload}, {len(work.apps)} apps, {len(topo)} GPUs"
    write_plots(results, out, title)
    for n, s in summary["policies"].items():
        print(
            f"{n:18s} max_rho={s['max_rho']:.2f} p99_rho={s['p99_rho']:.2f} "
            f"median_rho={s['median_rho']:.2f} rho>1={s['frac_rho_gt_1']:.1%} "
            f"rho>1.05={s['frac_rho_gt_105']:.1%} "
            f"excess>1.05={s[f'frac_excess_rho_{args.ideal_time}_gt_105']:.1%} "
            f"gavel_max_rho={s['max_rho_gavel']:.2f} gpu_h={s['gpu_time_hours']:.0f} "
            f"jct_h={s['avg_jct_hours']:.1f} placement={s['mean_placement_score']:.3f} "
            f"wall={s['wall_s']:.1f}s"
            + (f" max_stretch/bound={s['max_stretch_over_bound']:.2f}" if args.bound else "")
        )
    if args.bound:
        print(f"{'bound':18s} max_stretch={summary['bound']['bound_max_stretch']:.3g} "
              "(no scheduler's worst app is below it)")
    return 0


def run_bound(work: Workload, topo: Topology, restart_s: float,
              policies: dict[str, dict[str, Any]]) -> dict[str, float]:
    """The trace's bounds (themis.sim.bound); adds each policy's max stretch over the
    bound to its summary. A policy below the bound is a defect of the bound or of the
    simulator: an error, never a result."""
    from themis.sim.bound import bounds
    from themis.sim.isolated import isolated_finish_times

    b = bounds(work.apps, topo, restart_s, isolated_finish_times(work.apps, len(topo)))
    for name, s in policies.items():
        ratio = s["max_stretch"] / b["bound_max_stretch"]
        if ratio < 1 - 1e-6:
            raise SimError(f"policy {name}: max stretch {s['max_stretch']:.6g} is below the "
                           f"lower bound {b['bound_max_stretch']:.6g} (a defect: please report)")
        s["max_stretch_over_bound"] = ratio
    return b


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="themis-sim")
    configure(p)
    return run_cli(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
