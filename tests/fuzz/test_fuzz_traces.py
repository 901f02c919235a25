"""Fuzzing the simulator's trace input (``themis sim --trace``): philly-gavel ``.trace``
files, their ``simulation_throughputs.json`` and converted workloads (``.json`` /
``.json.gz``), all through :func:`themis.sim.loader.load_any`. Only the documented error
(one :class:`SpecError` naming the file, and the line or record); an accepted input gives
a workload whose every app is valid and whose numbers are finite and in range."""

from __future__ import annotations

import copy
import gzip
import json
import math
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

from tests.fuzz._fuzz import JSON_SNIPPETS, byte_mutations, fuzz_settings, mutated
from themis.sim.errors import SpecError
from themis.sim.loader import TraceOptions, load_any
from themis.sim.philly import MAX_ARRIVAL_S
from themis.sim.workload import FORMAT, FORMAT_VERSION, MAX_JOB_GPUS, Workload

#: lines in the philly-gavel format (7 tab-separated fields, docs/simulator.md)
TRACE = (
    "ResNet-50 (batch size 64)\tpython3 train.py\t-n\t1\t20000\t0.000000\t1\n"
    "ResNet-50 (batch size 128)\tpython3 train.py\t-n\t1\t50000\t60.000000\t2\n"
    "Transformer (batch size 128)\tpython3 train.py\t-step\t1\t9000\t7200.5\t4\n"
    "\n"
    "LM (batch size 20)\tpython3 main.py\t--steps\t0\t123456\t90000\t8\n"
)
THROUGHPUTS: dict[str, Any] = {"v100": {
    "('ResNet-50 (batch size 64)', 1)": {"null": 10.5, "('LM (batch size 20)', 1)": [1.0, 2.0]},
    "('ResNet-50 (batch size 128)', 1)": {"null": 6.25},
    "('ResNet-50 (batch size 128)', 2)": {"null": 11.0},
    "('Transformer (batch size 128)', 1)": {"null": 3.0},
    "('LM (batch size 20)', 1)": {"null": 40.0},
}, "k80": {}}
WORKLOAD: dict[str, Any] = {
    "format": FORMAT, "version": FORMAT_VERSION, "meta": {"converter": "philly-gavel"},
    "apps": [
        ["a-1", 0.0, "ResNet-50", "compute", [["a-1", 0.1, 1, 500.0], ["a-2", 0.2, 2, 80.0]],
         [[[0, 2000.0], [1, 1000.0]]]],
        ["b-7", 3600.5, "LM", "network", [["b-7", 0.025, 8, 12.0]], [[[0, 120000.0]]]],
    ],
}
TRACE_SNIPPETS = [b"\t", b"\n", b"\r\n", b"-1", b"0", b"nan", b"inf", b"1e400", b"9" * 5000,
                  b"1" * 20, b"1_000", b"\xff", b"\xc3\x28", b"\x00", b"ResNet-50",
                  b"Unknown (batch size 1)", b"   ", b"65", b"1025", b"0x10"]


def check(w: Workload) -> None:
    """An accepted workload: valid apps, finite numbers in range."""
    assert isinstance(w, Workload)
    assert len({a.id for a in w.apps}) == len(w.apps)
    for a in w.apps:
        assert math.isfinite(a.arrival) and 0 <= a.arrival <= MAX_ARRIVAL_S
        for j in a.jobs:
            assert math.isfinite(j.serial_iter_time) and j.serial_iter_time > 0
            assert math.isfinite(j.tau) and j.tau > 0
            assert 1 <= j.max_demand <= MAX_JOB_GPUS
        for phase in a.phases:
            for i, iters in phase:
                assert 0 <= i < len(a.jobs) and math.isfinite(iters) and iters > 0
        assert math.isfinite(a.total_work)
    json.dumps(w.meta)  # the summary copies it


def load(path: Path, *, trace: bool) -> None:
    try:
        w = load_any(str(path), trace=TraceOptions(days=30) if trace else None)
    except SpecError as exc:
        event("refused")
        assert str(path) in str(exc) and "\n" not in str(exc), str(exc)
        return
    event("accepted")
    check(w)


@fuzz_settings(150)
@given(st.data())
def test_philly_trace_files(data: st.DataObject) -> None:
    body = data.draw(byte_mutations(TRACE.encode(), TRACE_SNIPPETS))
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "vc1.trace").write_bytes(body)
        (Path(d) / "simulation_throughputs.json").write_text(json.dumps(THROUGHPUTS))
        load(Path(d), trace=True)


@fuzz_settings(150)
@given(st.data())
def test_throughputs_file(data: st.DataObject) -> None:
    doc = data.draw(mutated(copy.deepcopy(THROUGHPUTS)))
    try:
        text = json.dumps(doc).encode("utf-8", "surrogatepass")
    except ValueError:  # an integer too long to print
        text = b"{}"
    body = data.draw(byte_mutations(text, JSON_SNIPPETS))
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "vc1.trace").write_text(TRACE)
        (Path(d) / "simulation_throughputs.json").write_bytes(body)
        load(Path(d), trace=True)


@fuzz_settings(150)
@given(st.data())
def test_converted_workloads(data: st.DataObject) -> None:
    doc = data.draw(mutated(copy.deepcopy(WORKLOAD), max_changes=4))
    try:
        text = json.dumps(doc).encode("utf-8", "surrogatepass")
    except ValueError:
        text = b"{}"
    body = data.draw(byte_mutations(text, JSON_SNIPPETS))
    gz = data.draw(st.booleans())
    if gz:
        body = gzip.compress(body, mtime=0)
        if data.draw(st.booleans()):  # damage the compressed stream too
            body = data.draw(byte_mutations(body, [b"\x00", b"\xff" * 8, b"\x1f\x8b"]))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / ("w.json.gz" if gz else "w.json")
        path.write_bytes(body)
        load(path, trace=False)


def test_a_gzip_bomb_is_refused_without_inflating_it() -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "w.json.gz"
        with gzip.open(path, "wb") as fh:  # ~300 MB of spaces, ~300 kB compressed
            for _ in range(300):
                fh.write(b" " * (1 << 20))
        try:
            load_any(str(path))
        except SpecError as exc:
            assert "size limit" in str(exc), str(exc)
        else:
            raise AssertionError("accepted a gzip bomb")
