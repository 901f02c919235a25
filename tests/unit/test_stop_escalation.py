"""A run told to stop that ignores its SIGTERM is killed (SIGKILL) after the stop grace, by
both launchers, on every stop's one path (docs/jobs.md, "Keras model.fit"): the YARN
runner (its step target, the AM's stop) and the local launcher (its step target during the
search and after it, a lease end); the checkpoints the job wrote before are kept.

The job is a fake: a process that ignores SIGTERM (and, for the runner, writes a step every
50 ms and a checkpoint first)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from themis.am.launchers.yarn.runner import Runner
from themis.hadoop.checkpoint_mirror import CheckpointMirror
from themis.hadoop.webhdfs import WebHdfs

from ._fake_webhdfs import FakeWebHdfs

# writes a checkpoint, then a step every 50 ms in a run directory (as Keras does), and
# ignores SIGTERM
DEAF = """
import itertools, signal, sys, time
from pathlib import Path
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter
signal.signal(signal.SIGTERM, signal.SIG_IGN)
ckpt, logdir = Path(sys.argv[1]), Path(sys.argv[2]) / "train"
ckpt.mkdir(parents=True, exist_ok=True)
(ckpt / "ckpt-3.index").write_bytes(b"three")
logdir.mkdir(parents=True, exist_ok=True)
with open(logdir / "events.out.tfevents.1.job", "wb") as f:
    w = RecordWriter(f)
    for step in itertools.count(1):
        v = summary_pb2.Summary.Value(tag="batch_loss", simple_value=1.0 / step)
        w.write(event_pb2.Event(wall_time=time.time(), step=step,
                                summary=summary_pb2.Summary(value=[v])).SerializeToString())
        f.flush()
        time.sleep(0.05)
"""


@pytest.fixture
def fake() -> Iterator[FakeWebHdfs]:
    f = FakeWebHdfs()
    yield f
    f.close()


def _am(stop_after_steps: int | None) -> tuple[ThreadingHTTPServer, list[dict[str, Any]]]:
    """An AM's /api/report that records the reports; it asks to stop once a report shows
    ``stop_after_steps`` steps (None: never)."""
    reports: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            r = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            reports.append(r)
            stop = stop_after_steps is not None and r.get("steps", 0) >= stop_after_steps
            body = json.dumps({"stop": stop}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, reports


@pytest.mark.parametrize("stop", ["step target", "asked by the AM"])
def test_runner_kills_a_job_that_ignores_its_sigterm_and_keeps_its_checkpoint(
        stop: str, fake: FakeWebHdfs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, reports = _am(10 if stop == "asked by the AM" else None)
    monkeypatch.chdir(tmp_path)
    if stop == "step target":
        monkeypatch.setenv("THEMIS_MAX_STEPS", "10")
    monkeypatch.setattr("themis.am.launchers.yarn.runner.PAST_TARGET_GRACE_S", 0.5)
    script = tmp_path / "job.py"
    script.write_text(DEAF)
    ckpt, logdir = Path("checkpoints"), Path("tflogs")
    fs = WebHdfs(fake.url)
    runner = Runner(f"http://127.0.0.1:{server.server_address[1]}", "j0", 1, logdir,
                    [sys.executable, str(script), str(ckpt), str(logdir)], report_every=0.1,
                    metric="train/batch_loss", checkpoint_dir=ckpt,
                    store=CheckpointMirror(fs, ckpt, "/app/ckpt-dir/j0"), stop_grace=1.0)

    def watchdog() -> None:  # without the SIGKILL the job would run forever: fail instead
        child = runner._child
        if child is not None and child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)

    timer = threading.Timer(25.0, watchdog)
    timer.start()
    try:
        t0 = time.monotonic()
        rc = runner.run()
        took = time.monotonic() - t0
    finally:
        timer.cancel()
        server.shutdown()
        server.server_close()
    assert took < 20, f"not killed after its stop grace ({took:.0f} s)"
    events = [e for r in reports for e in r["events"]]
    kinds = [e["event"] for e in events]
    assert "stop-requested" in kinds and "stop-killed" in kinds, kinds
    killed = next(e for e in events if e["event"] == "stop-killed")
    assert killed["after_s"] >= 1.0
    if stop == "step target":
        assert "at its step target: killed (SIGKILL)" in killed["reason"]
        assert rc == 0  # stopped at its target: the run reached it
        assert next(e for e in events if e["event"] == "exit")["reason"] == "max-steps"
    else:
        assert "(asked by the AM): killed (SIGKILL)" in killed["reason"]
        assert rc == -signal.SIGKILL
    # the checkpoint the job wrote before it was killed is in HDFS, saved before the exit
    assert "/app/ckpt-dir/j0/ckpt-3.index" in fake.files
    assert kinds.index("stop-killed") < kinds.index("checkpoint-saved") \
        < kinds.index("runner-exit")


# --------------------------------------------------------------------------- local launcher
DEAF_LOCAL = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              "print('ready', flush=True); time.sleep(60)")


def _local_am(tmp_path: Path) -> tuple[Any, list[str]]:
    from themis.am.launchers.local.appmaster import AppMaster
    from themis.am.launchers.local.spec import default_app
    from themis.arbiter.cluster_backend import uniform_cluster

    topo = uniform_cluster(1, 2).topology()
    app = default_app(0, max_resource=3, eta=3, steps_per_unit=20, max_gpus_per_job=1)
    lines: list[str] = []
    am = AppMaster(app, "127.0.0.1:1", tmp_path, topo, t0=time.time(), kill_after_s=0.5,
                   emit=lines.append)
    am._sync_jobs()
    return am, lines


def _start_deaf(am: Any, job_id: str) -> Any:
    """The job's run: a process that ignores SIGTERM, on m0-g0, with a checkpoint."""
    from themis.am.launchers.local.jobs import Segment

    r = am.runners[job_id]
    r.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    (r.checkpoint_dir / "ckpt-3.index").write_bytes(b"three")
    r.proc = subprocess.Popen([sys.executable, "-c", DEAF_LOCAL], stdout=subprocess.PIPE,
                              start_new_session=True)
    assert r.proc.stdout is not None and r.proc.stdout.readline() == b"ready\n"
    r.segments.append(Segment(0, ("m0-g0",), time.time(), 20))
    am.registry.acquire(("m0-g0",), f"{am.name}/{job_id}")
    return r


@pytest.mark.parametrize("when", ["search running", "search over"])
def test_local_launcher_kills_a_job_that_ignores_its_step_target_sigterm(
        when: str, tmp_path: Path) -> None:
    am, lines = _local_am(tmp_path)
    job_id = sorted(am.runners)[0]
    r = _start_deaf(am, job_id)
    proc = r.proc
    try:
        am.launcher.stop(job_id, "max-steps")  # as _past_target does
        step: Callable[[float], None] = (
            (lambda now: am.place(now, {}, {})) if when == "search running"
            else am.wind_down)
        step(time.time())  # within the grace: still running
        assert proc.poll() is None
        end = time.time() + 10
        while proc.poll() is None and time.time() < end:
            time.sleep(0.2)
            step(time.time())
        assert proc.poll() == -signal.SIGKILL, "not killed after kill_after_s"
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(5)
    assert any(f"{job_id} still running" in line and "at its step target" in line
               and "killed (SIGKILL)" in line for line in lines), lines
    events = am.launcher.poll()
    ended = next(e for e in events if e.job_id == job_id)
    # it ran past its target: its run is complete (as the YARN runner reports it)
    assert ended.code.name == "REACHED" and ended.status == -signal.SIGKILL  # no failure
    assert r.checkpoint_steps() == [3]  # its checkpoint kept


def test_local_launcher_kills_a_job_that_ignores_its_lease_end_sigterm(tmp_path: Path
                                                                       ) -> None:
    am, lines = _local_am(tmp_path)
    job_id = sorted(am.runners)[0]
    r = _start_deaf(am, job_id)
    proc = r.proc
    try:
        am.place(time.time(), {}, {})  # its GPU is no longer usable: SIGTERM
        assert r.stop_sent is not None and r.segments[-1].stopped_by == "lease"
        end = time.time() + 10
        while proc.poll() is None and time.time() < end:
            time.sleep(0.2)
            am.place(time.time(), {}, {})
        assert proc.poll() == -signal.SIGKILL
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(5)
    assert any("after its SIGTERM (lease): killed" in line for line in lines), lines
