"""``themis sim`` end to end on a tiny slice of the built-in trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from themis.sim.cli import main


def test_cli_writes_summary_and_plots(tmp_path: Path) -> None:
    rc = main(
        [
            "--policies",
            "themis,gandiva",
            "--out",
            str(tmp_path),
            "--max-apps",
            "6",
            "--cluster",
            "default:0.125",
            "--no-progress",
            "--check-invariants",
        ]
    )
    assert rc == 0
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert set(doc) == {"trace", "config", "policies"}
    assert doc["trace"]["input"] == "builtin" and doc["trace"]["workload"] == 1
    assert doc["trace"]["max_apps"] == 6 and doc["config"]["ideal_time"] == "exact"
    s = doc["policies"]
    assert set(s) == {"themis", "gandiva"}
    for v in s.values():
        for k in (
            "max_rho",
            "median_rho",
            "gpu_time_hours",
            "avg_jct_hours",
            "mean_placement_score",
            "apps",
            "wall_s",
            "p99_rho",
            "frac_rho_gt_1",
            "max_rho_gavel",
            "p99_excess_rho_exact",
        ):
            assert k in v
        assert v["apps"] == 6
    for png in ("rho_cdf.png", "gpu_time.png", "placement_cdf.png"):
        assert (tmp_path / png).stat().st_size > 1000


def test_cli_unknown_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--policies", "themis,nosuch", "--out", str(tmp_path), "--no-progress"]) == 2
    assert "valid policies" in capsys.readouterr().err


def test_cli_bad_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "c.json"
    bad.write_text("{not json")
    assert main(["--cluster", str(bad), "--out", str(tmp_path), "--no-progress"]) == 2
    assert "c.json: not valid JSON" in capsys.readouterr().err


def _trace(tmp_path: Path) -> Path:
    """Three ResNet-50 jobs of one VC (two within 24 h of each other), one 100-h job."""
    d = tmp_path / "vc"
    d.mkdir()
    line = "ResNet-50 (batch size 64)\tcmd\t--steps\t0\t{steps}\t{arrival}\t1\n"
    (d / "abc.trace").write_text(
        line.format(steps=1000, arrival=0) + line.format(steps=2000, arrival=3600)
        + line.format(steps=10_000_000, arrival=200_000))
    thr = {"v100": {"('ResNet-50 (batch size 64)', 1)": {"null": 25.0}}}
    (tmp_path / "simulation_throughputs.json").write_text(json.dumps(thr))
    return d


def test_trace_conversions_are_options_and_recorded(tmp_path: Path) -> None:
    """A .trace replays as given by default (24-h groups, all days, no job cap, workload
    1); each conversion is an option and the summary records what was applied."""
    trace = _trace(tmp_path)
    base = ["--trace", str(trace), "--policies", "srtf", "--cluster", "default:0.0625",
            "--no-progress"]
    assert main([*base, "--out", str(tmp_path / "a")]) == 0
    t = json.loads((tmp_path / "a" / "summary.json").read_text())["trace"]
    assert t["input"] == "philly-gavel trace" and t["apps"] == 2 and t["jobs"] == 3
    assert (t["group_window_hours"], t["days"], t["max_job_hours"]) == (24.0, 0.0, 0.0)
    assert t["jobs_capped"] == 0 and t["workload"] == 1 and t["successive_halving"] is None
    assert main([*base, "--out", str(tmp_path / "b"), "--group-window-hours", "0",
                 "--max-job-hours", "10", "--days", "2", "--workload", "2"]) == 0
    t = json.loads((tmp_path / "b" / "summary.json").read_text())["trace"]
    assert t["apps"] == 2 and t["jobs"] == 2 and t["jobs_capped"] == 0
    assert t["successive_halving"] == {"demand_mult": 2, "seed": 0}
    assert main([*base, "--out", str(tmp_path / "c"), "--max-job-hours", "10"]) == 0
    t = json.loads((tmp_path / "c" / "summary.json").read_text())["trace"]
    assert t["jobs_capped"] == 1 and t["max_job_hours"] == 10.0


def test_trace_options_refused_on_a_converted_workload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--days", "3", "--out", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "converted workload" in err and "'days': 14.0" in err
    with pytest.raises(SystemExit) as exc:  # argparse: usage error
        main(["--days", "-1", "--out", str(tmp_path), "--no-progress"])
    assert exc.value.code == 2 and "must be a finite number >= 0" in capsys.readouterr().err


def test_progress_bar_advances_with_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--policies", "srtf", "--max-apps", "4", "--cluster", "default:0.125",
                 "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "GPU-h" in err and "100%" in err
