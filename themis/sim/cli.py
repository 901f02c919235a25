"""``themis sim``: run policies on a trace and write DIR/summary.json plus plots."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from themis.sim.cluster import load_cluster
from themis.sim.engine import SimConfig, SimResult, Simulator
from themis.sim.errors import SimError
from themis.sim.loader import load_any
from themis.sim.metrics import per_app, summarize
from themis.sim.policies import POLICY_NAMES, make_policy

DEFAULT_POLICIES = "themis,gandiva,tiresias,optimus,slaq,srtf,srsf"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "sim",
        help="simulate scheduling policies on a trace",
        description="Event-driven simulation of Themis and baselines (paper section 6).",
    )
    configure(p)
    p.set_defaults(func=run_cli)
    return p


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--trace",
        default="builtin",
        help="philly-gavel dir/file, converted .json[.gz], or 'builtin'",
    )
    p.add_argument(
        "--workload",
        type=int,
        default=2,
        choices=(1, 2),
        help="1: trace apps as is; 2: Hyperband successive-halving apps",
    )
    p.add_argument(
        "--policies",
        default=DEFAULT_POLICIES,
        help=f"comma-separated, from: {', '.join(POLICY_NAMES)}",
    )
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument(
        "--cluster",
        default=None,
        help="cluster spec JSON/YAML, 'default' (256 GPUs) or 'default:SCALE'",
    )
    p.add_argument("--fairness-knob", type=float, default=0.8)
    p.add_argument("--lease-minutes", type=float, default=10.0)
    p.add_argument("--restart-seconds", type=float, default=35.0)
    p.add_argument(
        "--expiry-quantum",
        type=float,
        default=120.0,
        help="lease expiries are rounded up to a multiple of this (seconds)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-apps", type=int, default=0, help="only the first N apps (0 = all)")
    p.add_argument(
        "--check-invariants", action="store_true", help="run the built-in invariant checks (slower)"
    )
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True)


def simulate(args: argparse.Namespace) -> dict[str, SimResult]:
    names = [n.strip() for n in args.policies.split(",") if n.strip()]
    policies = [make_policy(n, args.fairness_knob) for n in names]  # validates names first
    topo = load_cluster(args.cluster)
    work = load_any(args.trace, args.workload, args.seed)
    if args.max_apps > 0:
        work = work.head(args.max_apps)
    cfg = SimConfig(
        lease_s=args.lease_minutes * 60,
        restart_s=args.restart_seconds,
        seed=args.seed,
        check_invariants=args.check_invariants,
        expiry_quantum_s=args.expiry_quantum,
    )
    results: dict[str, SimResult] = {}
    for name, pol in zip(names, policies, strict=True):
        sim = Simulator(topo, work, pol, cfg)
        results[name] = _run(sim, name, args.progress)
    return results


def _run(sim: Simulator, name: str, progress: bool) -> SimResult:
    if not progress:
        return sim.run()
    from tqdm import tqdm

    end = max((a.arrival for a in sim.workload.apps), default=0.0) / 3600
    bar = tqdm(total=round(end, 1), desc=name, unit="sim-h", leave=True)

    def tick(now: float) -> None:
        h = round(now / 3600, 1)
        if h > bar.n:
            if h > (bar.total or 0):
                bar.total = h
            bar.update(h - bar.n)

    try:
        return sim.run(tick)
    finally:
        bar.close()


def run_cli(args: argparse.Namespace) -> int:
    try:
        results = simulate(args)
    except (SimError, ValueError) as exc:
        print(f"themis sim: error: {exc}", file=sys.stderr)
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    summary = {n: summarize(r) for n, r in results.items()}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True))
    (out / "apps.json").write_text(json.dumps({n: per_app(r) for n, r in results.items()}))
    from themis.sim.plots import write_plots

    write_plots(results, out)
    for n, s in summary.items():
        print(
            f"{n:18s} max_rho={s['max_rho']:.2f} median_rho={s['median_rho']:.2f} "
            f"gpu_h={s['gpu_time_hours']:.0f} jct_h={s['avg_jct_hours']:.1f} "
            f"placement={s['mean_placement_score']:.3f} wall={s['wall_s']:.1f}s"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="themis-sim")
    configure(p)
    return run_cli(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
