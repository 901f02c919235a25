"""Section 6 experiments, one command each::

    python -m themis.sim.experiments contention  --out DIR   # Fig. 14 (cluster 1, 1/2, 1/4)
    python -m themis.sim.experiments network     --out DIR   # Figs. 15-16 (0-100% network)
    python -m themis.sim.experiments error       --out DIR   # Fig. 17 (estimate error +-X%)
    python -m themis.sim.experiments lying       --out DIR   # Fig. 18 (one lying app, 64 GPUs)
    python -m themis.sim.experiments sensitivity --out DIR   # Fig. 19 (f x lease)
    python -m themis.sim.experiments sweep --traces DIR --out DIR  # every policy, many
                                                     # traces (themis.sim.sweep; --help)

Each writes DIR/<name>.json (rows of parameters and metrics) and DIR/<name>.png. Sizes
default to small slices (the machine is shared); ``--apps`` raises them.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from themis.mechanism.placement import PlacementProfile
from themis.mechanism.topology import Topology
from themis.sim.cluster import build_cluster, default_cluster
from themis.sim.engine import SimConfig, Simulator
from themis.sim.loader import load_any
from themis.sim.metrics import summarize
from themis.sim.policies import Policy, make_policy
from themis.sim.policies.themis import ThemisPolicy
from themis.sim.synthetic import synthetic
from themis.sim.workload import AppSpec, JobSpec, Workload

BASELINES = "themis,gandiva,tiresias,optimus,slaq,srtf,srsf"
Row = dict[str, Any]


def _run(
    topo: Topology, w: Workload, pol: Policy, lease_min: float = 10.0, seed: int = 0
) -> dict[str, Any]:
    cfg = SimConfig(lease_s=lease_min * 60, seed=seed, check_invariants=False)
    return summarize(Simulator(topo, w, pol, cfg).run())


def contention(args: argparse.Namespace) -> list[Row]:
    w = load_any("builtin", 1).head(args.apps)
    rows = []
    for scale in (1.0, 0.5, 0.25):
        topo = default_cluster(scale)
        for p in args.policies.split(","):
            rows.append(
                {
                    "scale": scale,
                    "gpus": len(topo),
                    "policy": p,
                    **_run(topo, w, make_policy(p), seed=args.seed),
                }
            )
            _log(rows[-1])
    return rows


def network(args: argparse.Namespace) -> list[Row]:
    rows = []
    topo = default_cluster(args.scale)
    for pct in (0, 20, 40, 60, 80, 100):
        w = synthetic(
            args.apps,
            seed=args.seed,
            network_fraction=pct / 100,
            successive_halving=True,
            interarrival_s=600.0,
        )
        for p in args.policies.split(","):
            rows.append(
                {"network_pct": pct, "policy": p, **_run(topo, w, make_policy(p), seed=args.seed)}
            )
            _log(rows[-1])
    return rows


def error(args: argparse.Namespace) -> list[Row]:
    rows = []
    topo = default_cluster(args.scale)
    w = load_any("builtin", 2, args.seed).head(args.apps)
    for x in (0, 5, 10, 20, 30):
        rng = random.Random(args.seed)
        errs = {a.id: rng.uniform(-x, x) / 100 for a in w.apps}
        rows.append(
            {
                "error_pct": x,
                "policy": "themis",
                **_run(topo, w, ThemisPolicy(errors=errs), seed=args.seed),
            }
        )
        _log(rows[-1])
    return rows


def lying_cluster() -> Topology:
    """Section 6.3: 64 GPUs, a single 8-GPU machine, the others 2-GPU machines."""
    return build_cluster([(1, [2, 2, 2, 2]), (28, [2])], racks=4)


def lying(args: argparse.Namespace) -> list[Row]:
    topo = lying_cluster()
    apps = []
    for a in range(8):  # 8 identical network-intensive apps, 2 jobs of 8 GPUs each
        jobs = (JobSpec(f"L{a}-0", 1.0, 8, 1e4), JobSpec(f"L{a}-1", 1.0, 8, 1e4))
        apps.append(AppSpec(f"L{a}", 0.0, jobs, (((0, 3.6e4), (1, 3.6e4)),), "network"))
    w = Workload(apps)
    rows: list[Row] = []
    true = apps[0].profile
    for seed in range(args.seed, args.seed + max(1, getattr(args, "seeds", 1))):
        truthful_jct = None
        for x in (0, 10, 20, 30, 40, 60, 80, 100):
            f = 1 + x / 100
            # over-report the slowdown of spread placements by X% (dense ones stay at 1)
            lie = PlacementProfile(true.slot, true.machine, true.rack * f, true.cluster * f)
            pol = ThemisPolicy(reported_profiles={"L0": lie})
            sim = Simulator(topo, w, pol, SimConfig(seed=seed, check_invariants=False))
            r = sim.run()
            jct = {a.id: a.jct / 3600 for a in r.apps}
            honest = [v for k, v in jct.items() if k != "L0"]
            if truthful_jct is None:
                truthful_jct = jct["L0"]
            rows.append({
                "seed": seed, "lie_pct": x, "liar_jct_h": jct["L0"],
                "truthful_avg_jct_h": sum(honest) / len(honest),
                # the liar's JCT against its own truthful run with the same seed
                "liar_change_pct": 100.0 * (jct["L0"] / truthful_jct - 1.0),
            })
            _log(rows[-1])
    return rows


def sensitivity(args: argparse.Namespace) -> list[Row]:
    rows = []
    topo = default_cluster(args.scale)
    w = load_any("builtin", 2, args.seed).head(args.apps)
    for f in (float(x) for x in args.knobs.split(",")):
        for lease in (float(x) for x in args.leases.split(",")):
            rows.append(
                {
                    "f": f,
                    "lease_min": lease,
                    "policy": "themis",
                    **_run(topo, w, ThemisPolicy(fairness_knob=f), lease, args.seed),
                }
            )
            _log(rows[-1])
    return rows


EXPERIMENTS: dict[str, tuple[Callable[[argparse.Namespace], list[Row]], str, str]] = {
    "contention": (contention, "gpus", "max_rho"),
    "network": (network, "network_pct", "max_rho"),
    "error": (error, "error_pct", "max_rho"),
    "lying": (lying, "lie_pct", "liar_jct_h"),
    "sensitivity": (sensitivity, "lease_min", "max_rho"),
}


def _log(row: Row) -> None:
    keep = {
        k: (round(v, 3) if isinstance(v, float) else v)
        for k, v in row.items()
        if k
        in (
            "scale",
            "gpus",
            "policy",
            "network_pct",
            "error_pct",
            "lie_pct",
            "f",
            "lease_min",
            "max_rho",
            "median_rho",
            "gpu_time_hours",
            "liar_jct_h",
            "truthful_avg_jct_h",
            "wall_s",
        )
    }
    print(json.dumps(keep), flush=True)


def plot(name: str, rows: list[Row], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, xkey, ykey = EXPERIMENTS[name]
    fig, ax = plt.subplots(figsize=(6, 4))
    if name == "lying":  # means over the seeds; bars: min..max of the liar's JCT
        import statistics

        xs = sorted({r["lie_pct"] for r in rows})
        by_x = {x: [r for r in rows if r["lie_pct"] == x] for x in xs}
        liar = [statistics.mean(r["liar_jct_h"] for r in by_x[x]) for x in xs]
        lo = [m - min(r["liar_jct_h"] for r in by_x[x]) for m, x in zip(liar, xs, strict=True)]
        hi = [max(r["liar_jct_h"] for r in by_x[x]) - m for m, x in zip(liar, xs, strict=True)]
        ax.errorbar(xs, liar, yerr=[lo, hi], marker="o", capsize=3, label="lying app")
        ax.plot(xs, [statistics.mean(r["truthful_avg_jct_h"] for r in by_x[x]) for x in xs],
                marker="s", label="truthful avg")
        ax.set_ylabel("app completion time (h)")
    else:
        series = "f" if name == "sensitivity" else "policy"
        for s in dict.fromkeys(r[series] for r in rows):
            sel = [r for r in rows if r[series] == s]
            ax.plot(
                [r[xkey] for r in sel], [r[ykey] for r in sel], marker="o", label=f"{series}={s}"
            )
        ax.set_ylabel(ykey)
    ax.set_xlabel(xkey)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["sweep"]:  # its own options (themis.sim.sweep)
        from themis.sim import sweep

        return sweep.main(args_in[1:])
    p = argparse.ArgumentParser(
        prog="python -m themis.sim.experiments",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("experiment", choices=[*sorted(EXPERIMENTS), "sweep"],
                   help="which figure of section 6 to reproduce (see above); 'sweep': "
                   "see 'sweep --help'")
    p.add_argument("--out", type=Path, required=True,
                   help="directory for <experiment>.json and <experiment>.png (created)")
    p.add_argument("--apps", type=int, default=40,
                   help="apps in the workload slice: the first N apps of the built-in "
                        "trace (contention: workload 1; error, sensitivity: workload 2) "
                        "or N synthetic apps (network) (default: %(default)s)")
    p.add_argument("--scale", type=float, default=0.25,
                   help="cluster size as a fraction of the paper's 256 GPUs, for "
                        "network/error/sensitivity (default: %(default)s = 64 GPUs)")
    p.add_argument("--policies", default=BASELINES,
                   help="comma-separated policies to compare where the experiment "
                        "compares policies (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the workloads (synthetic apps, trace conversion) and "
                        "of the simulations' random choices (default: %(default)s)")
    p.add_argument("--seeds", type=int, default=1,
                   help="lying only: repeat with seeds SEED..SEED+N-1 (rows per seed; the "
                        "plot shows means and min..max) (default: %(default)s)")
    p.add_argument("--knobs", default="0.0,0.2,0.5,0.8,0.95",
                   help="sensitivity only: comma-separated fairness knobs f "
                        "(default: %(default)s)")
    p.add_argument("--leases", default="5,10,20,40",
                   help="sensitivity only: comma-separated lease lengths in minutes "
                        "(default: %(default)s)")
    args = p.parse_args(args_in)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = EXPERIMENTS[args.experiment][0](args)
    (args.out / f"{args.experiment}.json").write_text(json.dumps(rows, indent=1))
    plot(args.experiment, rows, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
