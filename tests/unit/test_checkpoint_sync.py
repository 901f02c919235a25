"""Checkpoints of a running job reach HDFS before it exits (issue 35: a run whose host dies
never exits, so a save after the exit never comes): the runner copies the job's checkpoint
directory every ``--checkpoint-every`` seconds, and a copy taken while the job writes never
leaves HDFS's index naming a checkpoint whose files were not complete (docs/am.md,
"Faults"); a run that a newer run of its job took over writes nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from themis.am.launchers.yarn.runner import CHECKPOINT_SETTLE_S, Runner
from themis.hadoop.checkpoint_mirror import CheckpointFenced, CheckpointMirror
from themis.hadoop.webhdfs import WebHdfs, WebHdfsError

from ._fake_webhdfs import FakeWebHdfs
from ._http import recording_am

REMOTE = "/app/ckpt-dir/j0"
# a job that stores a checkpoint, then waits (at most 5 s) until it sees it in HDFS, and
# exits 0 if it did, 3 if not: only a copy taken while it runs can make it exit 0
JOB = """
import sys, time, urllib.request
from pathlib import Path
ckpt, url = Path(sys.argv[1]), sys.argv[2]
ckpt.mkdir(parents=True, exist_ok=True)
(ckpt / "ckpt-5.index").write_bytes(b"five")
(ckpt / "checkpoint").write_text("ckpt-5")
end = time.time() + 5
while time.time() < end:
    try:
        with urllib.request.urlopen(url + "/webhdfs/v1%s/checkpoint?op=OPEN" % sys.argv[3]) as r:
            if r.read() == b"ckpt-5":
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.1)
sys.exit(3)
"""


@pytest.fixture
def fake() -> Iterator[FakeWebHdfs]:
    f = FakeWebHdfs()
    yield f
    f.close()


@pytest.fixture
def am_url() -> Iterator[str]:
    with recording_am() as (url, _):
        yield url


@pytest.mark.parametrize(("every", "status"), [(0.3, 0), (0.0, 3)])
def test_the_runner_copies_checkpoints_while_the_job_runs(
        fake: FakeWebHdfs, am_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        every: float, status: int) -> None:
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "job.py"
    script.write_text(JOB)
    ckpt = Path("checkpoints")
    runner = Runner(am_url, "j0", 1, Path("tflogs"),
                    [sys.executable, str(script), str(ckpt), fake.url, REMOTE],
                    report_every=0.1, checkpoint_dir=ckpt,
                    store=CheckpointMirror(WebHdfs(fake.url), ckpt, REMOTE),
                    checkpoint_every=every)
    # with copies every 0.3 s the job sees its checkpoint in HDFS and exits 0; without,
    # only the save after its exit (3) puts it there
    assert runner.run() == status
    assert bytes(fake.files[f"{REMOTE}/checkpoint"]) == b"ckpt-5"


def test_a_checkpoint_written_while_hdfs_is_written_goes_with_the_next_copy(
        fake: FakeWebHdfs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fs = WebHdfs(fake.url)
    local = tmp_path / "ckpt"
    store = CheckpointMirror(fs, local, REMOTE)
    store.restore()
    (local / "ckpt-5.index").write_bytes(b"five")
    (local / "checkpoint").write_text("ckpt-5")
    real_write = fs.write

    def job_writes_meanwhile(path: str, data: bytes, **kw: Any) -> None:
        real_write(path, data, **kw)
        if path.endswith("ckpt-5.index") and not (local / "ckpt-9.index").exists():
            # the job stores its next checkpoint while ckpt-5 is being copied
            (local / "ckpt-9.index").write_bytes(b"nine")
            (local / "checkpoint").write_text("ckpt-9")

    monkeypatch.setattr(fs, "write", job_writes_meanwhile)
    assert store.save() == (2, 0)
    # the index copied is the one read with the files: it names ckpt-5, complete in HDFS
    assert bytes(fake.files[f"{REMOTE}/checkpoint"]) == b"ckpt-5"
    assert f"{REMOTE}/ckpt-9.index" not in fake.files
    assert store.save() == (2, 0)
    assert bytes(fake.files[f"{REMOTE}/checkpoint"]) == b"ckpt-9"
    assert bytes(fake.files[f"{REMOTE}/ckpt-9.index"]) == b"nine"


def test_a_directory_changed_while_it_is_read_is_not_written(
        fake: FakeWebHdfs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Keras' BackupAndRestore rewrites latest.weights.h5, then training_metadata.json (the
    # epoch of those weights), in place: a copy that read the old weights and the new
    # metadata would resume a later epoch with older weights (the optimizer's step going
    # back); one that read a file the job rotated away would name a missing checkpoint
    fs = WebHdfs(fake.url)
    local = tmp_path / "backup"
    store = CheckpointMirror(fs, local, REMOTE)
    store.restore()
    (local / "latest.weights.h5").write_bytes(b"weights-epoch-1")
    (local / "training_metadata.json").write_text('{"epoch": 1}')
    assert store.save() == (2, 0)
    (local / "latest.weights.h5").write_bytes(b"weights-epoch-2")
    (local / "training_metadata.json").write_text('{"epoch": 2}')
    real_read = store._read

    def epoch_3_meanwhile(rel: str) -> bytes:
        out = real_read(rel)
        if rel == "latest.weights.h5" and out == b"weights-epoch-2":
            (local / "latest.weights.h5").write_bytes(b"weights-epoch-3 (longer)")
            (local / "training_metadata.json").write_text('{"epoch": 3}')
        return out

    monkeypatch.setattr(store, "_read", epoch_3_meanwhile)
    assert store.save() == (0, -1)  # nothing written: HDFS keeps epoch 1's pair
    assert bytes(fake.files[f"{REMOTE}/latest.weights.h5"]) == b"weights-epoch-1"
    assert bytes(fake.files[f"{REMOTE}/training_metadata.json"]) == b'{"epoch": 1}'
    assert store.save() == (2, 0)  # at rest: epoch 3's pair, the metadata last
    assert bytes(fake.files[f"{REMOTE}/latest.weights.h5"]) == b"weights-epoch-3 (longer)"
    assert bytes(fake.files[f"{REMOTE}/training_metadata.json"]) == b'{"epoch": 3}'
    placed = [p.rsplit("/", 1)[1] for p in fake.placed if p.startswith(f"{REMOTE}/")]
    assert placed[-2:] == ["latest.weights.h5", "training_metadata.json"]

    # a file rotated away while the directory is read: nothing written, nothing deleted
    (local / "ckpt-10.index").write_bytes(b"ten")

    def rotates_meanwhile(rel: str) -> bytes:
        (local / "latest.weights.h5").unlink(missing_ok=True)
        return real_read(rel)

    monkeypatch.setattr(store, "_read", rotates_meanwhile)
    assert store.save() == (0, -1)
    assert f"{REMOTE}/ckpt-10.index" not in fake.files
    assert bytes(fake.files[f"{REMOTE}/latest.weights.h5"]) == b"weights-epoch-3 (longer)"


def test_a_copy_while_the_job_runs_waits_until_the_directory_settled(
        fake: FakeWebHdfs, tmp_path: Path) -> None:
    fs = WebHdfs(fake.url)
    local = tmp_path / "ckpt"
    store = CheckpointMirror(fs, local, REMOTE)
    store.restore()
    (local / "ckpt-5.index").write_bytes(b"five")
    assert store.save(settle_s=60.0) == (0, -1)  # written just now: maybe half a checkpoint
    assert f"{REMOTE}/ckpt-5.index" not in fake.files
    old = time.time() - 120
    os.utime(local / "ckpt-5.index", (old, old))
    assert store.save(settle_s=60.0) == (1, 0)


def test_a_run_whose_job_a_newer_run_took_over_writes_nothing(
        fake: FakeWebHdfs, tmp_path: Path) -> None:
    # nm-paused (issue 35): a frozen run thaws and saves while the job's newer run, started
    # elsewhere when YARN declared the node lost, owns the directory: the old one is fenced
    fs = WebHdfs(fake.url)
    old = CheckpointMirror(fs, tmp_path / "old", REMOTE, owner="container_1_0001_01_000002")
    old.restore()
    (tmp_path / "old" / "step").write_text("35")
    assert old.save() == (1, 0)
    new = CheckpointMirror(fs, tmp_path / "new", REMOTE, owner="container_1_0001_01_000003")
    new.restore()
    assert (tmp_path / "new" / "step").read_text() == "35"
    (tmp_path / "new" / "step").write_text("60")
    new.save()
    (tmp_path / "old" / "step").write_text("40")  # the thawed run went on a little
    with pytest.raises(CheckpointFenced, match="container_1_0001_01_000003"):
        old.save()
    assert bytes(fake.files[f"{REMOTE}/step"]) == b"60"
    assert bytes(fake.files[f"{REMOTE}.owner"]) == b"container_1_0001_01_000003"
    # the owner file is beside the directory: a restore does not bring it into a job's dir
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["step"]


def test_the_runner_reports_a_fenced_save_and_does_not_retry_it(
        fake: FakeWebHdfs, am_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    monkeypatch.chdir(tmp_path)
    ckpt = Path("checkpoints")
    fs = WebHdfs(fake.url)
    store = CheckpointMirror(fs, ckpt, REMOTE, owner="c-old")
    runner = Runner(am_url, "j0", 1, Path("tflogs"),
                    [sys.executable, "-c", "import pathlib; pathlib.Path('checkpoints', "
                     "'step').write_text('7')"],
                    report_every=0.1, checkpoint_dir=ckpt, store=store)
    # a newer run claims the directory while this one runs
    real_restore = store.restore

    def restore_then_newer_claims() -> tuple[int, int]:
        out = real_restore()
        fs.write(f"{REMOTE}.owner", b"c-new")
        return out

    monkeypatch.setattr(store, "restore", restore_then_newer_claims)
    events: list[dict[str, Any]] = []
    monkeypatch.setattr(runner, "_add_event", events.append)
    assert runner.run() == 0
    assert [e["event"] for e in events if e["event"].startswith("checkpoint-save")] == [
        "checkpoint-save-fenced"]
    assert f"{REMOTE}/step" not in fake.files
    creates = [p for op, p in fake.ops if op == "CREATE" and p.endswith("/step")]
    assert creates == []


# a job that counts its runs in its checkpoint directory
COUNTER = ("import pathlib; p = pathlib.Path('checkpoints', 'runs'); "
           "p.write_text(str(int(p.read_text()) + 1 if p.exists() else 1))")


@pytest.mark.parametrize(("failures", "status", "stored"), [(2, 0, b"42"), (None, 4, b"41")])
def test_a_restore_is_retried_while_hdfs_is_away_and_the_job_never_starts_afresh(
        fake: FakeWebHdfs, am_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        failures: int | None, status: int, stored: bytes) -> None:
    # HDFS back after two tries: the job goes on from the stored 41. Never back (within
    # restore_wait): the run ends with 4, and the job, which from scratch would have saved
    # runs=1 over the stored 41, never ran
    monkeypatch.chdir(tmp_path)
    WebHdfs(fake.url).write(f"{REMOTE}/runs", b"41")
    ckpt = Path("checkpoints")
    store = CheckpointMirror(WebHdfs(fake.url), ckpt, REMOTE)
    real_restore, left = store.restore, [failures]

    def away() -> tuple[int, int]:
        if left[0] is None or left[0] > 0:
            left[0] = None if left[0] is None else left[0] - 1
            raise ConnectionError("no DataNode")
        return real_restore()

    monkeypatch.setattr(store, "restore", away)
    events: list[dict[str, Any]] = []
    runner = Runner(am_url, "j0", 1, Path("tflogs"), [sys.executable, "-c", COUNTER],
                    report_every=0.1, checkpoint_dir=ckpt, store=store,
                    restore_wait=30.0 if failures else 2.0)
    monkeypatch.setattr(runner, "_add_event", events.append)
    assert runner.run() == status
    assert bytes(fake.files[f"{REMOTE}/runs"]) == stored
    kinds = [e["event"] for e in events]
    assert kinds[-1] == "runner-exit" and events[-1]["status"] == status
    if failures is None:
        assert not (ckpt / "runs").exists()
        assert "checkpoint-restore-failed" in kinds and "checkpoint-saved" not in kinds


# a job that rewrites its backup in place, as Keras' BackupAndRestore does: half of
# ``weights``, a pause (``--pause``; ``writing`` marks it, outside the directory), the other
# half, then ``meta`` naming the version; then ``--gap`` seconds of training. It dies of
# SIGTERM at once unless ``--graceful`` (then it finishes its write and exits 0).
REWRITER = """
import pathlib, signal, sys, time
gap, graceful = float(sys.argv[1]), sys.argv[2] == "1"
d = pathlib.Path("checkpoints"); d.mkdir(exist_ok=True)
stop = []
if graceful:
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
v = 0
while not stop:
    v += 1
    with open(d / "weights", "wb") as f:
        f.write(b"%04d" % v * 500); f.flush()
        pathlib.Path("writing").touch()
        time.sleep(0.3)
        f.write(b"%04d" % v * 500)
    pathlib.Path("writing").unlink()
    (d / "meta").write_text(str(v))
    time.sleep(gap)
"""


def _rewriting_runner(am_url: str, fake: FakeWebHdfs, tmp_path: Path, gap: float,
                      graceful: bool, monkeypatch: pytest.MonkeyPatch
                      ) -> tuple[Runner, list[dict[str, Any]]]:
    monkeypatch.chdir(tmp_path)
    WebHdfs(fake.url).write(f"{REMOTE}/weights", b"0000" * 1000)  # a complete backup
    WebHdfs(fake.url).write(f"{REMOTE}/meta", b"0")
    script = tmp_path / "job.py"
    script.write_text(REWRITER)
    ckpt = Path("checkpoints")
    runner = Runner(am_url, "j0", 1, Path("tflogs"),
                    [sys.executable, str(script), str(gap), "1" if graceful else "0"],
                    report_every=0.05, checkpoint_dir=ckpt,
                    store=CheckpointMirror(WebHdfs(fake.url), ckpt, REMOTE))
    # the AM asks the run to stop while the job is in the middle of a write
    monkeypatch.setattr(runner, "report", lambda final=False: Path("writing").exists())
    events: list[dict[str, Any]] = []
    monkeypatch.setattr(runner, "_add_event", events.append)
    return runner, events


def _stored(fake: FakeWebHdfs) -> tuple[bytes, bytes]:
    return bytes(fake.files[f"{REMOTE}/weights"]), bytes(fake.files[f"{REMOTE}/meta"])


def _check_saved(fake: FakeWebHdfs, events: list[dict[str, Any]], saved: bool) -> None:
    """``saved``: a newer backup, whole, is in HDFS; else the complete first one, unsaved
    over."""
    weights, meta = _stored(fake)
    kinds = [e["event"] for e in events]
    if saved:
        assert meta != b"0" and weights == (b"%04d" % int(meta)) * 1000
        assert "checkpoint-saved" in kinds
    else:
        assert (weights, meta) == (b"0000" * 1000, b"0")
        assert "checkpoint-save-skipped" in kinds and "checkpoint-saved" not in kinds


def test_a_stop_asked_during_a_checkpoint_write_waits_until_it_is_written(
        fake: FakeWebHdfs, am_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    # the SIGTERM waits until the directory was quiet for WRITE_QUIET_S: the job, which
    # dies of it at once, has then finished the write, and its backup is saved whole
    runner, events = _rewriting_runner(am_url, fake, tmp_path, 1.0, False, monkeypatch)
    assert runner.run() == -15
    weights, meta = _stored(fake)
    assert meta != b"0" and weights == (b"%04d" % int(meta)) * 1000
    assert "checkpoint-saved" in [e["event"] for e in events]


@pytest.mark.parametrize("graceful", [False, True])
def test_a_job_killed_while_it_writes_leaves_the_stored_checkpoint_whole(
        fake: FakeWebHdfs, am_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        graceful: bool) -> None:
    # never quiet (no gap between writes): the SIGTERM goes after STOP_HOLD_S. Dying of it
    # cut a write: nothing is saved, HDFS keeps the complete backup it had. A job that
    # finishes its write and exits 0 on SIGTERM is saved
    import themis.am.launchers.yarn.runner as runner_mod

    monkeypatch.setattr(runner_mod, "STOP_HOLD_S", 0.2)
    runner, events = _rewriting_runner(am_url, fake, tmp_path, 0.0, graceful, monkeypatch)
    assert runner.run() == (0 if graceful else -15)
    _check_saved(fake, events, saved=graceful)


@pytest.mark.skipif(not Path("/proc/self/fdinfo").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("gap", [0.3, 0.0])
def test_a_job_that_writes_more_often_than_the_quiet_period_is_stopped_between_writes(
        fake: FakeWebHdfs, am_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        gap: float) -> None:
    # a write every 0.6 s with 0.3 s of training in between (Keras' backup after each
    # short epoch): never quiet for WRITE_QUIET_S, so after QUIET_HOLD_S the job is frozen
    # in a gap - never in the pause inside its write, where it holds the file open - gets
    # its SIGTERM there and is saved whole. Without a gap there is no safe moment: the
    # SIGTERM goes after STOP_HOLD_S and nothing is saved
    import themis.am.launchers.yarn.runner as runner_mod

    monkeypatch.setattr(runner_mod, "QUIET_HOLD_S", 0.2)
    monkeypatch.setattr(runner_mod, "STOP_HOLD_S", 2.0)
    runner, events = _rewriting_runner(am_url, fake, tmp_path, gap, False, monkeypatch)
    assert runner.run() == -15
    _check_saved(fake, events, saved=bool(gap))


def test_open_for_writing_names_the_groups_files_open_for_writing(tmp_path: Path) -> None:
    from themis.am.launchers.yarn import openwrites

    if openwrites.open_for_writing(os.getpgid(0), tmp_path) is None:
        pytest.skip("needs Linux /proc")
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "old").write_text("x")
    job = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; f = open(sys.argv[1], 'w'); "
         "g = open(sys.argv[2]); print('ready', flush=True); time.sleep(30)",
         str(d / "w"), str(d / "old")], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert job.stdout is not None and job.stdout.readline() == b"ready\n"
        assert openwrites.open_for_writing(job.pid, d) == [str((d / "w").resolve())]
        assert openwrites.open_for_writing(job.pid, tmp_path / "elsewhere") == []
        assert not openwrites.stopped(job.pid)
        os.killpg(job.pid, signal.SIGSTOP)
        end = time.time() + 5
        while not openwrites.stopped(job.pid) and time.time() < end:
            time.sleep(0.01)
        assert openwrites.stopped(job.pid)
    finally:
        job.kill()
        job.wait(5)


def _step_runner(am_url: str, fake: FakeWebHdfs, then: str, monkeypatch: pytest.MonkeyPatch
                 ) -> tuple[Runner, list[dict[str, Any]]]:
    """A runner of a job that stores step 35 in ./checkpoints, then runs ``then``."""
    job = ("import pathlib, sys, time; d = pathlib.Path('checkpoints'); "
           f"d.mkdir(exist_ok=True); (d / 'step').write_text('35'); {then}")
    ckpt = Path("checkpoints")
    runner = Runner(am_url, "j0", 1, Path("tflogs"), [sys.executable, "-c", job],
                    report_every=0.05, checkpoint_dir=ckpt,
                    store=CheckpointMirror(WebHdfs(fake.url), ckpt, REMOTE))
    events: list[dict[str, Any]] = []
    monkeypatch.setattr(runner, "_add_event", events.append)
    return runner, events


def test_a_job_killed_by_someone_else_right_after_a_write_is_saved(
        fake: FakeWebHdfs, am_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    # a crash or the OOM killer (here: SIGKILL from outside the runner) right after the job
    # stored a step: the step is saved (only a death by the stop's SIGTERM right after a
    # write is taken for a cut write); the AM-kill trials count anything less as a lost
    # checkpoint
    import signal
    import threading

    monkeypatch.chdir(tmp_path)
    runner, events = _step_runner(
        am_url, fake, "pathlib.Path('written').touch(); time.sleep(30)", monkeypatch)

    def kill_after_the_write() -> None:
        while not Path("written").exists() or runner._child is None:
            time.sleep(0.01)
        os.kill(runner._child.pid, signal.SIGKILL)

    threading.Thread(target=kill_after_the_write, daemon=True).start()
    assert runner.run() == -signal.SIGKILL
    assert bytes(fake.files[f"{REMOTE}/step"]) == b"35"
    assert "checkpoint-saved" in [e["event"] for e in events]


class _Unsettled:
    """A store whose first ``busy`` saves find the job writing (it last wrote
    ``written_ago`` seconds before each look), and whose next ``fail`` saves fail."""

    def __init__(self, busy: int, written_ago: float = 0.5, fail: int = 0) -> None:
        self.busy = busy
        self.fail = fail
        self.written_ago = written_ago
        self.saves = 0
        self.remote = "/ckpt"

    def save(self, settle_s: float = 0.0) -> tuple[int, int]:
        self.saves += 1
        if self.saves <= self.busy:
            return 0, -1
        if self.saves <= self.busy + self.fail:
            raise WebHdfsError("WebHDFS CREATE /ckpt.part/x: http://nn:9870 unreachable")
        return 1, 0

    def last_change(self) -> float:
        return time.time() - self.written_ago


def _sync_runner(tmp_path: Path, store: _Unsettled, every: float = 3600.0) -> Runner:
    return Runner("http://127.0.0.1:9", "j0", 1, tmp_path / "tflogs", ["true"],
                  report_every=0.1, checkpoint_dir=tmp_path / "ckpt",
                  store=cast(CheckpointMirror, store), checkpoint_every=every)


def _next_look_in(runner: Runner) -> float:
    return runner._next_sync - time.monotonic()


def test_a_copy_put_off_while_the_job_writes_is_tried_when_the_directory_is_quiet(
        tmp_path: Path) -> None:
    # The job wrote 0.5 s ago: the directory will have been quiet for CHECKPOINT_SETTLE_S
    # (2 s) 1.5 s from now, and that is when the next look comes - not at a fixed period
    # that can keep missing the quiet windows of a job checkpointing every few seconds.
    store = _Unsettled(busy=2, written_ago=0.5)
    runner = _sync_runner(tmp_path, store)
    runner._sync_checkpoints()
    assert store.saves == 1
    assert CHECKPOINT_SETTLE_S - 0.5 - 0.2 < _next_look_in(runner) <= CHECKPOINT_SETTLE_S - 0.5
    assert runner._until_next_look(time.monotonic() + 60) <= CHECKPOINT_SETTLE_S - 0.5
    runner._sync_checkpoints()
    assert store.saves == 1  # not before then
    runner._next_sync = time.monotonic()
    runner._sync_checkpoints()
    runner._next_sync = time.monotonic()
    runner._sync_checkpoints()
    # two looks found the job writing, the third copied; the next is an hour away
    assert store.saves == 3 and _next_look_in(runner) > 3000
    runner._sync_checkpoints()
    assert store.saves == 3


def test_a_failed_copy_is_tried_again_soon_backing_off_to_the_interval(
        tmp_path: Path) -> None:
    store = _Unsettled(busy=0, fail=5)
    runner = _sync_runner(tmp_path, store, every=6.0)
    waits = []
    for _ in range(6):
        runner._next_sync = time.monotonic()
        runner._sync_checkpoints()
        waits.append(round(_next_look_in(runner)))
    # HDFS away for five tries: 1, 2, 4 s, then the interval; back: the interval again
    assert waits == [1, 2, 4, 6, 6, 6] and store.saves == 6
    store.fail, store.saves = 1, 0
    runner._next_sync = time.monotonic()
    runner._sync_checkpoints()
    assert round(_next_look_in(runner)) == 1  # the backoff starts over after a success


def test_a_write_cut_by_an_hdfs_fault_neither_damages_the_stored_copy_nor_blocks_the_next(
        fake: FakeWebHdfs, tmp_path: Path) -> None:
    # A DataNode lost mid-write: in HDFS the file written has been replaced by the part
    # that arrived, and the writer that is gone holds its lease, so a CREATE that overwrites
    # it is refused until the NameNode recovers the lease (60 s or more): the copies of a
    # running job lagged that long after HDFS faults
    fs = WebHdfs(fake.url)
    local = tmp_path / "ckpt"
    store = CheckpointMirror(fs, local, REMOTE, owner="container_1")
    store.restore()
    (local / "ckpt-5.index").write_bytes(b"five")
    (local / "checkpoint").write_text("ckpt-5")
    assert store.save() == (2, 0)
    (local / "ckpt-9.index").write_bytes(b"nine")
    (local / "checkpoint").write_text("ckpt-9")
    fake.cut_writes = 2
    with pytest.raises(WebHdfsError):
        store.save()
    with pytest.raises(WebHdfsError):
        store.save()
    assert fake.leased  # the two cut writes hold their leases
    # the stored copy is the last complete one, whole
    assert bytes(fake.files[f"{REMOTE}/checkpoint"]) == b"ckpt-5"
    assert bytes(fake.files[f"{REMOTE}/ckpt-5.index"]) == b"five"
    assert f"{REMOTE}/ckpt-9.index" not in fake.files
    # the next copy goes through at once, leases or not
    assert store.save() == (2, 0)
    assert bytes(fake.files[f"{REMOTE}/checkpoint"]) == b"ckpt-9"
    assert bytes(fake.files[f"{REMOTE}/ckpt-9.index"]) == b"nine"
    # the next run's restore gets the complete copy only, and deletes the cut parts
    again = CheckpointMirror(fs, tmp_path / "run2", REMOTE, owner="container_2")
    assert again.restore() == (3, 14)
    assert sorted(p.name for p in (tmp_path / "run2").iterdir()) == [
        "checkpoint", "ckpt-5.index", "ckpt-9.index"]
    assert not fake.leased and not [p for p in fake.files if ".part/" in p]
    assert bytes(fake.files[f"{REMOTE}.owner"]) == b"container_2"


def test_a_claim_whose_write_was_cut_blocks_no_later_claim(
        fake: FakeWebHdfs, tmp_path: Path) -> None:
    fs = WebHdfs(fake.url)
    fs.write(f"{REMOTE}.owner", b"container_1")
    fake.cut_writes = 1
    with pytest.raises(WebHdfsError):
        CheckpointMirror(fs, tmp_path / "a", REMOTE, owner="container_2").restore()
    assert bytes(fake.files[f"{REMOTE}.owner"]) == b"container_1"  # whole
    CheckpointMirror(fs, tmp_path / "b", REMOTE, owner="container_2").restore()
    assert bytes(fake.files[f"{REMOTE}.owner"]) == b"container_2"


@pytest.mark.parametrize(("free", "saved"), [(0, False), (64 << 20, True)])
def test_a_job_that_fails_on_a_full_disk_is_not_saved(
        fake: FakeWebHdfs, am_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        free: int, saved: bool) -> None:
    # a job that failed (exit 1) while its checkpoint directory's disk was full may have died
    # of a write cut short there: HDFS keeps its last copy (here: none). With room left, a
    # failed job is saved as it left it
    import themis.am.launchers.yarn.runner as runner_mod

    monkeypatch.chdir(tmp_path)
    seen: list[Path] = []

    def fake_free(path: Path) -> int:
        seen.append(path)
        return free

    monkeypatch.setattr(runner_mod, "free_bytes", fake_free)
    runner, events = _step_runner(am_url, fake, "sys.exit(1)", monkeypatch)
    assert runner.run() == 1
    assert seen == [Path("checkpoints")]
    kinds = [e["event"] for e in events]
    if saved:
        assert bytes(fake.files[f"{REMOTE}/step"]) == b"35"
        assert "checkpoint-saved" in kinds
    else:
        assert f"{REMOTE}/step" not in fake.files
        assert "checkpoint-save-skipped" in kinds and "checkpoint-saved" not in kinds


def test_free_bytes_reads_the_nearest_existing_directory(tmp_path: Path) -> None:
    from themis.am.launchers.yarn.runner import free_bytes

    st = os.statvfs(tmp_path)
    here = free_bytes(tmp_path / "not" / "yet")  # a checkpoint directory not made yet
    assert here is not None and 0 < here <= st.f_blocks * st.f_frsize
