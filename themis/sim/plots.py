"""PNG plots of a comparison: rho CDF per policy (Figs. 9-10), GPU time bars (Figs. 11-12),
placement score CDF (Fig. 13)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from themis.sim.engine import SimResult


def _cdf(ax: object, values: list[float], label: str) -> None:
    xs = sorted(values)
    ys = [(i + 1) / len(xs) for i in range(len(xs))]
    ax.step(xs, ys, where="post", label=label)  # type: ignore[attr-defined]


def write_plots(results: Mapping[str, SimResult], out: Path, title: str = "") -> list[Path]:
    """rho_cdf.png, gpu_time.png and placement_cdf.png in ``out``; ``title`` (e.g. the
    trace, workload and cluster size) heads each plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, r in results.items():
        _cdf(ax, [a.rho for a in r.apps], name)
    ax.set_xscale("log")
    ax.set_xlabel("finish-time fairness rho = JCT / T_id (log scale; 1 = sharing incentive)")
    ax.set_ylabel("fraction of apps (CDF)")
    ax.axvline(1.0, color="grey", lw=0.5)
    ax.set_title(f"rho per app\n{title}", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "rho_cdf.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    names = list(results)
    ax.bar(names, [sum(a.gpu_time for a in results[n].apps) / 3600 for n in names])
    ax.set_ylabel("total GPU time (GPU-hours)")
    ax.set_xlabel("policy")
    ax.set_title(f"GPU time held by all apps\n{title}", fontsize=8)
    ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    paths.append(out / "gpu_time.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, r in results.items():
        _cdf(ax, [a.placement_score for a in r.apps], name)
    ax.set_xlabel("placement score per app (1/S, GPU-time weighted; 1 = no slowdown)")
    ax.set_ylabel("fraction of apps (CDF)")
    ax.set_title(f"placement score\n{title}", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "placement_cdf.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths
