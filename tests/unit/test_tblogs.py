"""TensorBoard logs kept in HDFS (the runner's copy, ``themis logs --tensorboard``), the
WebHDFS adapter over the ``hdfs`` package and the checkpoint store on the same library,
against an in-memory WebHDFS on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from themis.cli import main as themis_main
from themis.hadoop.tblogs import EventLogUpload, tensorboard_dir
from themis.hadoop.webhdfs import WebHdfs, WebHdfsError
from themis.profiler import LogDirTail

from ._fake_webhdfs import FakeWebHdfs

REPO = Path(__file__).resolve().parents[2]
APP = "application_1700000000000_0042"


@pytest.fixture
def fake() -> Iterator[FakeWebHdfs]:
    f = FakeWebHdfs()
    yield f
    f.close()


def _events(n: int, start: int = 1, tag: str = "loss") -> bytes:
    """``n`` serialized records of scalar events (TensorBoard's own record writer)."""
    import io

    buf = io.BytesIO()
    w = RecordWriter(buf)
    for step in range(start, start + n):
        ev = event_pb2.Event(wall_time=1.7e9 + step, step=step, summary=summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=tag, simple_value=1.0 / step)]))
        w.write(ev.SerializeToString())
    return buf.getvalue()


# ------------------------------------------------------------------ the WebHDFS adapter
def test_adapter_reads_writes_and_replaces(fake: FakeWebHdfs) -> None:
    fs = WebHdfs(fake.url)
    fs.mkdirs("/app")
    assert fs.status("/app")["type"] == "DIRECTORY"  # type: ignore[index]
    assert fs.status("/app/none") is None
    assert fs.read_or_none("/app/none") is None
    fs.write("/app/a.json", b"{}")
    assert fs.read("/app/a.json") == b"{}"
    fs.write_atomic("/app/state.json", b"v1")
    fs.write_atomic("/app/state.json", b"v2")
    assert fs.read_latest("/app/state.json") == b"v2"
    assert "/app/state.json.tmp" not in fake.files
    assert not [p for p in fake.files if p.startswith("/app/state.json.tmp")]
    # a write cut by an HDFS fault leaves the state whole and blocks no later write (its
    # temp file's lease is held by the writer that is gone)
    fake.cut_writes = 1
    with pytest.raises(WebHdfsError):
        fs.write_atomic("/app/state.json", b"v3")
    assert fs.read_latest("/app/state.json") == b"v2"
    fs.write_atomic("/app/state.json", b"v4")
    assert fs.read_latest("/app/state.json") == b"v4"
    fake.files["/app/only.tmp"] = bytearray(b"half")  # an interrupted write_atomic
    assert fs.read_latest("/app/only") == b"half"
    assert fs.rename("/app/a.json", "/app/b.json") and not fs.rename("/app/a.json", "/app/c")
    fs.append("/app/log", b"ab")  # creates
    fs.append("/app/log", b"cd")
    assert fs.read("/app/log") == b"abcd"
    fs.write("/app/t/j1/events.1", b"x")
    fs.write("/app/t/j1/validation/events.2", b"yy")
    assert sorted((rel, st["length"]) for rel, st in fs.files_under("/app/t")) == [
        ("j1/events.1", 1), ("j1/validation/events.2", 2)]
    assert fs.files_under("/app/none") == []
    assert fs.delete("/app", recursive=True) and fs.status("/app/log") is None


def test_adapter_errors_name_the_operation_path_and_cause(fake: FakeWebHdfs) -> None:
    fs = WebHdfs(fake.url)
    fs.write("/x", b"1")
    with pytest.raises(WebHdfsError, match=r"CREATE /x: .*already exists.*FileAlreadyExists"):
        fs.write("/x", b"2", overwrite=False)
    with pytest.raises(WebHdfsError, match=r"OPEN /nope: .*does not exist") as e:
        fs.read("/nope")
    assert e.value.missing
    down = WebHdfs("http://127.0.0.1:9", timeout=2)
    with pytest.raises(WebHdfsError, match=r"GETFILESTATUS /x: http://127.0.0.1:9 unreachable"):
        down.status("/x")


def test_checkpoint_store_publishes_atomically_over_the_same_library(
        fake: FakeWebHdfs, tmp_path: Path) -> None:
    from themis.jobs.storage import StorageError, WebHdfsStore

    store = WebHdfsStore(fake.url, "/ckpt/j1", "root")
    src = tmp_path / "src"
    src.mkdir()
    (src / "model").write_bytes(b"w" * 100)
    store.put_dir(src, "ckpt-40")
    assert store.list_names() == ["ckpt-40"]
    assert not any(".tmp-" in p for p in fake.files)  # published by one rename
    with pytest.raises(StorageError, match="already exists"):
        store.put_dir(src, "ckpt-40")
    store.get_dir("ckpt-40", tmp_path / "back")
    assert (tmp_path / "back" / "model").read_bytes() == b"w" * 100
    store.delete("ckpt-40")
    assert store.list_names() == []


# ------------------------------------------------------------------ the runner's copy
def test_upload_copies_growing_event_files_once_each_byte(fake: FakeWebHdfs,
                                                          tmp_path: Path) -> None:
    logdir = tmp_path / "tflogs"
    logdir.mkdir()
    fs = WebHdfs(fake.url)
    dest = tensorboard_dir(f"/user/root/.themis/{APP}", "j1")
    up = EventLogUpload(fs, logdir, dest)
    first, second = _events(300), _events(200, start=301)
    f1 = logdir / "events.out.tfevents.1.nm1.100.0.job"
    f2 = logdir / "validation" / "events.out.tfevents.2.nm2.200.0.job"  # Keras' layout
    for pos in range(0, len(first), 1001):  # cuts records anywhere
        with open(f1, "ab") as f:
            f.write(first[pos:pos + 1001])
        up.sync()
        assert bytes(fake.files[f"{dest}/{f1.name}"]) == f1.read_bytes()
    assert up.sync() == 0  # nothing new: no call
    f2.parent.mkdir()
    f2.write_bytes(second)  # the job restarted elsewhere: a new file
    assert up.sync() == len(second)
    assert bytes(fake.files[f"{dest}/validation/{f2.name}"]) == second
    assert fake.bytes_received == up.uploaded == len(first) + len(second)
    assert [op for op, _ in fake.ops].count("APPEND") >= 2
    # what TensorBoard would read from the copy is what the job wrote
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / f1.name).write_bytes(bytes(fake.files[f"{dest}/{f1.name}"]))
    assert [p.step for p in LogDirTail(copy).poll()] == list(range(1, 301))


def test_failed_append_is_repaired_by_rewriting_the_file(
        fake: FakeWebHdfs, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    f1 = tmp_path / "events.out.tfevents.1.h.1.0"
    up = EventLogUpload(WebHdfs(fake.url), tmp_path, "/tb/j1")
    f1.write_bytes(_events(10))
    up.sync()
    fake.fail_appends = 1
    with open(f1, "ab") as f:
        f.write(_events(10, start=11))
    assert up.sync() == 0
    assert "copy to HDFS failed (retried)" in caplog.text and "AlreadyBeingCreated" in caplog.text
    assert up.sync() == f1.stat().st_size  # the whole file, rewritten
    assert bytes(fake.files[f"/tb/j1/{f1.name}"]) == f1.read_bytes()


JOB = textwrap.dedent("""
    import sys, time
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter
    with open(sys.argv[1], "wb") as f:
        w = RecordWriter(f)
        for step in range(1, 41):
            ev = event_pb2.Event(step=step, summary=summary_pb2.Summary(
                value=[summary_pb2.Summary.Value(tag="loss", simple_value=1.0 / step)]))
            w.write(ev.SerializeToString())
            f.flush()
            time.sleep(0.02)
""")


def test_runner_copies_the_jobs_event_files_to_hdfs(fake: FakeWebHdfs, tmp_path: Path) -> None:
    logdir = tmp_path / "tflogs"
    dest = tensorboard_dir(f"/user/root/.themis/{APP}", "j7")
    event_file = logdir / "events.out.tfevents.9.nm1.7.0.job"
    env = {**os.environ, "THEMIS_WEBHDFS_URL": fake.url, "HADOOP_USER_NAME": "root",
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "themis.am.launchers.yarn.runner", "--am", "http://127.0.0.1:9",
           "--job-id", "j7", "--logdir", str(logdir), "--start-slots", "0",
           "--report-every", "0.2", "--tensorboard-dir", dest, "--tensorboard-every", "0.2",
           "--", sys.executable, "-c", JOB, str(event_file)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert bytes(fake.files[f"{dest}/{event_file.name}"]) == event_file.read_bytes()
    assert event_file.stat().st_size > 0


def test_am_launches_runners_with_the_jobs_hdfs_tensorboard_dir() -> None:
    from themis.am.launchers.yarn.am import AppMaster
    from themis.am.launchers.yarn.records import Run

    from .test_submarine_am import _spec

    app_dir = f"/user/root/.themis/{APP}"
    am = AppMaster(_spec(), APP, None, arbiter="-", hdfs=None, app_dir=app_dir)  # type: ignore[arg-type]
    job_id = next(iter(am.hb.jobs))
    command, _ = am._command_for(Run(run_id=1, job_id=job_id, node="nm1:8041", host="nm1",
                                     gpus=1, request_id=1, container="c1"))
    assert f"--tensorboard-dir {app_dir}/tensorboard/{job_id} " in command


# ------------------------------------------------------------------ themis logs
def _logs(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = themis_main(["logs", *argv])
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_logs_downloads_every_jobs_event_files(fake: FakeWebHdfs, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    base = tensorboard_dir(f"/user/root/.themis/{APP}")
    fake.files[f"{base}/j1/events.out.tfevents.1.a"] = bytearray(_events(5))
    fake.files[f"{base}/j2/events.out.tfevents.2.b"] = bytearray(_events(7))
    fake._mkdirs(f"{base}/j1")
    fake._mkdirs(f"{base}/j2")
    dest = tmp_path / "tb"
    code, out, err = _logs(capsys, APP, "--tensorboard", "--dest", str(dest),
                           "--webhdfs", fake.url, "--user", "root")
    assert code == 0, err
    assert out == f"{dest}\n"  # only the directory on stdout
    assert f"tensorboard --logdir {dest}" in err and "2 new or grown" in err
    assert (dest / "j2" / "events.out.tfevents.2.b").read_bytes() == _events(7)
    steps = {p.step for p in LogDirTail(dest / "j1").poll()}
    assert steps == {1, 2, 3, 4, 5}
    fake.files[f"{base}/j1/events.out.tfevents.1.a"] += _events(2, start=6)  # still running
    code, out, err = _logs(capsys, APP, "--tensorboard", "--dest", str(dest),
                           "--webhdfs", fake.url)
    assert code == 0 and "1 new or grown" in err
    assert (dest / "j1" / "events.out.tfevents.1.a").stat().st_size == len(
        fake.files[f"{base}/j1/events.out.tfevents.1.a"])


def test_logs_refuses_bad_use_with_a_message(fake: FakeWebHdfs, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _logs(capsys, "app-1", "--tensorboard", "--webhdfs", fake.url)
    assert (code, out) == (2, "") and "not a YARN application id" in err
    code, out, err = _logs(capsys, APP, "--webhdfs", fake.url)
    assert code == 2 and "--tensorboard" in err
    code, out, err = _logs(capsys, APP, "--tensorboard", "--dest", str(tmp_path / "x"),
                           "--webhdfs", fake.url)
    assert (code, out) == (1, "") and f"/user/root/.themis/{APP}/tensorboard" in err
    code, out, err = _logs(capsys, APP, "--tensorboard", "--webhdfs", "http://127.0.0.1:9")
    assert (code, out) == (1, "") and "unreachable" in err and "Traceback" not in err


def test_logs_help_explains_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _logs(capsys, "--help")
    assert code == 0
    for option in ("--tensorboard", "--dest", "--webhdfs", "--user"):
        assert option in out
    assert "yarn logs -applicationId" in out  # where the containers' own logs are
