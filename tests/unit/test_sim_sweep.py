"""The evaluation sweep (themis/sim/sweep.py) on a tiny trace: the table's schema, the
per-run cache (resume), the cluster sizes and the command's errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from themis.sim import sweep
from themis.sim.experiments import main as experiments_main

LINE = "{family} (batch size 64)\tcmd\t--steps\t0\t{steps}\t{arrival}\t{gpus}\n"


def _traces(tmp_path: Path) -> Path:
    """Two VCs of one seed, 4 apps each (one family per day, 1-4 GPUs, 0.5-3 h)."""
    root = tmp_path / "traces"
    seed = root / "seed=0"
    seed.mkdir(parents=True)
    for vc, shift in (("aaa", 0), ("bbb", 3600)):
        lines = [LINE.format(family=fam, steps=steps, arrival=day * 86400 + shift + k * 60,
                             gpus=gpus)
                 for day, (fam, gpus) in enumerate((("ResNet-18", 1), ("LM", 2),
                                                    ("ResNet-50", 4), ("Transformer", 2)))
                 for k, steps in enumerate((4000, 9000))]
        (seed / f"{vc}.trace").write_text("".join(lines))
    thr = {"v100": {f"('{fam} (batch size 64)', {g})": {"null": 2.0 * g}
                    for fam in ("ResNet-18", "LM", "ResNet-50", "Transformer")
                    for g in (1, 2, 4)}}
    (root / "simulation_throughputs.json").write_text(json.dumps(thr))
    return root


def _run(tmp_path: Path, traces: Path, *extra: str) -> int:
    return experiments_main(["sweep", "--traces", str(traces), "--out", str(tmp_path / "out"),
                             "--apps", "3", "--policies", "themis,srtf,themis@paper",
                             "--contentions", "1,4", "--workloads", "1,2", "--jobs", "1",
                             "--no-progress", *extra])


def test_sweep_table_schema_and_resume(tmp_path: Path) -> None:
    traces = _traces(tmp_path)
    assert _run(tmp_path, traces) == 0
    out = tmp_path / "out"
    runs = list(csv.DictReader((out / "runs.csv").open()))
    assert len(runs) == 2 * 2 * 2 * 3  # traces x workloads x contentions x policies
    assert {r["policy"] for r in runs} == {"themis", "srtf", "themis@paper"}
    assert {r["ideal_time"] for r in runs if r["policy"] == "themis@paper"} == {"paper"}
    for r in runs:
        assert int(r["apps"]) == 3
        # no policy beats the lower bound of its run (themis.sim.bound)
        assert float(r["max_stretch"]) >= float(r["bound_max_stretch"]) * (1 - 1e-6)
        assert float(r["max_stretch_over_bound"]) >= 1 - 1e-6
        for k in sweep.RUN_METRICS:
            assert r[k] != "", k
        assert float(r["max_rho_exact"]) >= float(r["p99_rho_exact"]) >= float(
            r["median_rho_exact"]) > 0
    table = list(csv.DictReader((out / "table.csv").open()))
    assert [(t["contention"], t["policy"]) for t in table][:3] == [
        ("1x", "themis"), ("1x", "srtf"), ("1x", "themis@paper")]
    assert {t["contention"] for t in table} == {"1x", "4x", "all"}
    for t in table:
        assert int(t["runs"]) == 4 if t["contention"] != "all" else int(t["runs"]) == 8
        for col, _, how in sweep.TABLE:
            assert f"{col} mean" in t and f"{col} sd" in t
            if how == "ratio":
                assert float(t[f"{col} mean"]) >= 1.0
        assert 0.0 <= float(t["apps rho>1 mean"]) <= 1.0
        # Shockwave's margin: fewer apps above 1.05 than above 1, excess no more than rho
        assert float(t["apps rho>1.05 mean"]) <= float(t["apps rho>1 mean"])
        assert float(t["max stretch / bound mean"]) >= 1.0
    # each column from its own values: the mean of the runs' metric, and of the ratios
    for t in table:
        mine = [r for r in runs if r["policy"] == t["policy"]
                and t["contention"] in ("all", f"{r['contention']}x")]
        values = [float(r["p99_excess_rho_exact"]) for r in mine]
        assert float(t["p99 excess mean"]) == pytest.approx(sum(values) / len(values),
                                                            rel=1e-5)
        best = {k: min(float(r["p99_excess_rho_exact"]) for r in runs
                       if (r["trace"], r["workload"], r["contention"]) == k)
                for k in {(r["trace"], r["workload"], r["contention"]) for r in mine}}
        ratios = [float(r["p99_excess_rho_exact"]) / best[(r["trace"], r["workload"],
                                                            r["contention"])] for r in mine]
        assert float(t["p99 excess / best mean"]) == pytest.approx(
            sum(ratios) / len(ratios), rel=1e-5)
    md = (out / "table.md").read_text()
    assert "### Contention 4x" in md and "| themis@paper |" in md
    for png in ("sweep_p99_excess_rho_exact.png", "sweep_frac_excess_rho_exact_gt_105.png",
                "sweep_max_stretch_over_bound.png",
                "sweep_gpu_time.png"):
        assert (out / png).stat().st_size > 5000
    meta = json.loads((out / "sweep.json").read_text())
    assert meta["runs"] == 24 and meta["simulated"] == 24 and len(meta["traces"]) == 2
    # resume: every run is cached, a second sweep simulates nothing
    cached = sorted((out / "runs").rglob("*.json"))
    assert len(cached) == 24 + 1  # the runs and their bounds (one per trace and setting)
    assert len(json.loads(next((out / "runs").rglob("bounds.json")).read_text())) == 2 * 2 * 2
    stamps = [p.stat().st_mtime_ns for p in cached]
    assert _run(tmp_path, traces) == 0
    assert [p.stat().st_mtime_ns for p in cached] == stamps
    assert json.loads((out / "sweep.json").read_text())["cached"] == 24


def test_default_policies_and_traces_per_seed(tmp_path: Path) -> None:
    """A default sweep runs the contenders on the first VCs of each seed; 'all' every
    registered policy."""
    refs = [sweep.TraceRef(f"seed={s}/{vc}", "x", vc) for s in (0, 1) for vc in "abc"]
    picked, where = sweep.per_seed(refs, 2, "found")
    assert [r.name for r in picked] == ["seed=0/a", "seed=0/b", "seed=1/a", "seed=1/b"]
    assert "first 2 of each seed directory: 4 traces" in where
    traces = _traces(tmp_path)
    args = ["sweep", "--traces", str(traces), "--out", str(tmp_path / "o"), "--apps", "2",
            "--contentions", "4", "--workloads", "1", "--jobs", "1", "--no-progress",
            "--vcs-per-seed", "1"]
    assert experiments_main(args) == 0
    meta = json.loads((tmp_path / "o" / "sweep.json").read_text())
    assert meta["policies"] == list(sweep.DEFAULT_POLICIES) and meta["traces"] == ["seed=0/aaa"]
    assert experiments_main([*args, "--policies", "all"]) == 0
    meta = json.loads((tmp_path / "o" / "sweep.json").read_text())
    assert set(meta["policies"]) >= {"themis", "themis-inf", "fifo", "themis@paper"}


def test_sized_cluster_and_base_size() -> None:
    for g in (1, 2, 5, 8, 13, 40, 64, 126, 256):
        topo = sweep.sized_cluster(g)
        assert len(topo) == g
    assert max(len(m) for m in sweep.sized_cluster(64).machines.values()) == 8


def test_sweep_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert experiments_main(["sweep", "--traces", str(tmp_path / "nope"), "--out",
                             str(tmp_path / "o"), "--no-progress"]) == 2
    assert "must be a directory" in capsys.readouterr().err
    traces = _traces(tmp_path)
    assert _run(tmp_path, traces, "--policies", "themis@gavel") == 2
    assert "unknown policy 'themis@gavel'" in capsys.readouterr().err
    assert experiments_main(["sweep", "--traces", str(traces), "--out", str(tmp_path / "o"),
                             "--apps", "50", "--no-progress"]) == 2
    assert "no VC trace has >= 50 apps" in capsys.readouterr().err
    assert _run(tmp_path, traces, "--vcs-per-seed", "-1") == 2
    assert "--vcs-per-seed" in capsys.readouterr().err
