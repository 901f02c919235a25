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
    s = json.loads((tmp_path / "summary.json").read_text())
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
        ):
            assert k in v
        assert v["apps"] == 6
    for png in ("rho_cdf.png", "gpu_time.png", "placement_cdf.png"):
        assert (tmp_path / png).stat().st_size > 1000


def test_cli_unknown_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--policies", "themis,fifo", "--out", str(tmp_path), "--no-progress"]) == 2
    assert "valid policies" in capsys.readouterr().err


def test_cli_bad_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "c.json"
    bad.write_text("{not json")
    assert main(["--cluster", str(bad), "--out", str(tmp_path), "--no-progress"]) == 2
    assert "c.json: not valid JSON" in capsys.readouterr().err
