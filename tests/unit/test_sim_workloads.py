"""Trace converter, workload files, cluster specs, synthetic and Hyperband workloads."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from themis.sim.cluster import load_cluster
from themis.sim.errors import SpecError
from themis.sim.hyperband import workload2
from themis.sim.loader import builtin_path, load_any
from themis.sim.philly import CONVERTER_VERSION, convert
from themis.sim.synthetic import synthetic
from themis.sim.workload import load_workload, save_workload

THR = {
    "v100": {
        "('ResNet-50 (batch size 64)', 1)": {"null": 4.0},
        "('ResNet-50 (batch size 64)', 4)": {"null": 10.0},
        "('LM (batch size 20)', 1)": {"null": 50.0},
    }
}


def _line(jt: str, steps: int, arrival: float, gpus: int) -> str:
    return f"{jt}\tcmd\t-n\t1\t{steps}\t{arrival}\t{gpus}\n"


def _trace(tmp_path: Path, lines: list[str]) -> Path:
    d = tmp_path / "seed=0"
    d.mkdir()
    (d / "vc1.trace").write_text("".join(lines))
    (tmp_path / "simulation_throughputs.json").write_text(json.dumps(THR))
    return d


def test_convert_durations_grouping_and_classes(tmp_path: Path) -> None:
    d = _trace(
        tmp_path,
        [
            _line("ResNet-50 (batch size 64)", 400, 0.0, 1),
            _line("ResNet-50 (batch size 64)", 1000, 60.0, 4),
            _line("LM (batch size 20)", 500, 120.0, 1),
            _line("ResNet-50 (batch size 64)", 400, 200000.0, 1),
        ],
    )
    w = convert(d)
    assert w.meta["converter_version"] == CONVERTER_VERSION
    assert [len(a.jobs) for a in w.apps] == [2, 1, 1]  # same family within 24 h grouped
    a = w.apps[0]
    assert a.placement == "compute" and w.apps[1].placement == "network"
    # duration on own GPUs = steps / throughput: 400/4 = 100 s; 1000/10 = 100 s
    j0, j1 = a.jobs
    assert a.phases[0][0][1] * j0.serial_iter_time / j0.max_demand == pytest.approx(100.0)
    assert a.phases[0][1][1] * j1.serial_iter_time / j1.max_demand == pytest.approx(100.0)


def test_malformed_line_names_file_line_and_problem(tmp_path: Path) -> None:
    d = _trace(tmp_path, [_line("ResNet-50 (batch size 64)", 400, 0.0, 1), "bad\tline\n"])
    with pytest.raises(SpecError, match=r"vc1.trace:2: expected 7 tab-separated fields"):
        convert(d)


def test_bad_number_and_unknown_type(tmp_path: Path) -> None:
    d = _trace(tmp_path, [_line("ResNet-50 (batch size 64)", 400, 0.0, 1).replace("400", "x")])
    with pytest.raises(SpecError, match="total_steps"):
        convert(d)
    (d / "vc1.trace").write_text(_line("BERT (batch size 8)", 4, 0.0, 1))
    with pytest.raises(SpecError, match="unknown job type"):
        convert(d)


def test_roundtrip_and_builtin(tmp_path: Path) -> None:
    w = synthetic(5, seed=1)
    p = tmp_path / "w.json.gz"
    save_workload(w, p)
    back = load_workload(p)
    assert [a.id for a in back.apps] == [a.id for a in w.apps]
    for a, b in zip(back.apps, w.apps, strict=True):
        assert a.total_work == pytest.approx(b.total_work, rel=1e-4)
        assert a.placement == b.placement and len(a.phases) == len(b.phases)
    p2 = tmp_path / "w2.json.gz"
    save_workload(back, p2)
    assert load_workload(p2).apps == back.apps  # stable after one round trip
    b = load_workload(builtin_path())
    assert len(b.apps) > 100 and b.meta["converter_version"] == CONVERTER_VERSION
    assert builtin_path().stat().st_size < 300_000


def test_workload2_is_successive_halving() -> None:
    w = workload2(load_any("builtin").head(20))
    for a in w.apps:
        sizes = [len(p) for p in a.phases]
        assert sizes[0] >= 2 and all(x == 2 * y for x, y in itertools.pairwise(sizes))
        assert sizes[-1] == 1


def test_synthetic_mix_roughly_table4() -> None:
    w = synthetic(400, seed=0)
    single = sum(1 for a in w.apps if len(a.jobs) == 1) / len(w.apps)
    assert 0.05 < single < 0.16
    assert max(len(a.jobs) for a in w.apps) <= 100
    nf = synthetic(300, seed=0, network_fraction=0.0)
    assert all(a.placement == "compute" for a in nf.apps)


def test_cluster_spec_files(tmp_path: Path) -> None:
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"shapes": [{"count": 2, "slots": [2, 2]}], "racks": 2}))
    assert len(load_cluster(str(p))) == 8
    y = tmp_path / "c.yaml"
    y.write_text("racks:\n  - name: r0\n    machines:\n      - {name: m0, slots: [1, 1]}\n")
    assert len(load_cluster(str(y))) == 2
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"shapes": [{"count": 1, "slots": [0]}]}))
    with pytest.raises(SpecError, match=r"bad.json: shapes\[0\]: 'slots'"):
        load_cluster(str(bad))
    with pytest.raises(SpecError, match="not found"):
        load_cluster(str(tmp_path / "nope.json"))
