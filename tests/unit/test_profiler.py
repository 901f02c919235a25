"""Profiler on event files written by real runs of the TensorFlow training job."""

from __future__ import annotations

import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from themis.mechanism.placement import DEFAULT
from themis.mechanism.topology import Locality
from themis.profiler import IterSample, LogDirTail, Profiler, estimate_slowdowns

# The jobs run TensorFlow in subprocesses; this process must not import it (see
# tests/conftest.py: TensorFlow and OR-Tools cannot share a process).
if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("the 'train' extra (TensorFlow) is not installed", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]


def _cmd(logdir: Path, max_steps: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "themis.jobs.train", "--logdir", str(logdir),
            "--checkpoint-uri", str(logdir / "ckpt"), "--max-steps", str(max_steps),
            "--checkpoint-every", "100", "--eval-every", "50", "--log-level", "WARNING",
            "--batch-size", "16", "--hidden-units", "32", *extra]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


@pytest.fixture(scope="module")
def two_segment_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A job run for 200 steps on 1 GPU (slot-local), then resumed to 400 steps on
    2 cross-machine GPUs with a slower step (emulated network cost)."""
    logdir = tmp_path_factory.mktemp("tf-run")
    subprocess.run(_cmd(logdir, 200), check=True, env=_env(), capture_output=True, timeout=120)
    subprocess.run(_cmd(logdir, 400, "--num-gpus", "2", "--locality", "rack",
                        "--step-sleep-ms", "4"),
                   check=True, env=_env(), capture_output=True, timeout=120)
    return logdir


def test_reads_tf2_scalars_from_real_run(two_segment_logdir: Path) -> None:
    prof = Profiler()
    prof.add_job("j", two_segment_logdir)
    new = prof.poll()
    assert set(new) == {"j"}
    job = prof.job("j")
    assert job.steps_done == 400
    assert [s for s, _ in job.losses] == list(range(1, 401))  # every step, once
    assert all(0 < v < 10 for _, v in job.losses)
    assert [s for s, _ in job.eval_losses] == list(range(50, 401, 50))
    assert job.latest_loss() == job.eval_losses[-1][1]
    # the first step of each segment is not timed (graph tracing)
    assert len(job.iterations) == 398
    first, second = job.iterations[:199], job.iterations[199:]
    assert {(s.num_gpus, s.locality) for s in first} == {(1, Locality.SLOT)}
    assert {(s.num_gpus, s.locality) for s in second} == {(2, Locality.RACK)}
    assert all(s.seconds > 0.004 for s in second)
    assert prof.poll() == {}  # nothing new


def test_slowdown_estimate_from_real_run(two_segment_logdir: Path) -> None:
    prof = Profiler()
    prof.add_job("j", two_segment_logdir)
    prof.poll()
    its = prof.job("j").iterations
    slot = statistics.median(s.seconds for s in its if s.locality is Locality.SLOT)
    rack = statistics.median(2 * s.seconds for s in its if s.locality is Locality.RACK)
    est = prof.slowdowns()
    assert set(est) == {Locality.RACK}  # the best level is the anchor; others unobserved
    assert est[Locality.RACK] == pytest.approx(rack / slot)
    assert est[Locality.RACK] > 2  # 4 ms emulated cost on a ~3 ms step, x2 GPUs
    profile = prof.placement_profile()
    assert profile.slot == 1.0 and profile.machine == 1.0
    assert profile.rack == pytest.approx(rack / slot)
    assert profile.cluster == profile.rack  # unobserved default 1.3 lifted to stay monotone
    serial = prof.job("j").serial_iter_time(profile, window=100)
    assert serial == pytest.approx(statistics.median(s.seconds for s in its[-100:]) * 2
                                   / profile.rack)


def test_truncated_file_is_read_incrementally(two_segment_logdir: Path, tmp_path: Path) -> None:
    src = sorted(two_segment_logdir.glob("events.out.tfevents.*"))[0]
    data = src.read_bytes()
    whole = LogDirTail(two_segment_logdir).poll()
    expected = [p for p in whole if p.source == src.name]
    # Grow a copy in uneven chunks, cutting records (and headers) at arbitrary bytes.
    dst = tmp_path / src.name
    tail = LogDirTail(tmp_path)
    got = []
    pos = 0
    for chunk in [5, 7, 100, 3, 1000, 17, 4096, 1, 99999999]:
        with open(dst, "ab") as f:
            f.write(data[pos : pos + chunk])
        pos += chunk
        got.extend(tail.poll())
    assert got == expected
    assert "tensorflow" not in sys.modules


def test_library_reader_tails_growing_files_and_new_ones(
    two_segment_logdir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """TensorBoard's loader resumes where it stopped: each byte is read once, a record cut
    anywhere waits for its end, and a second file (a restarted job) is picked up."""
    files = sorted(two_segment_logdir.glob("events.out.tfevents.*"))
    assert len(files) == 2
    expected = LogDirTail(two_segment_logdir).poll()
    tail = LogDirTail(tmp_path, stall_warn_s=60)
    got = []
    for src in files:
        data = src.read_bytes()
        dst = tmp_path / src.name
        for start in range(0, len(data), 997):  # 997: cuts records at varying bytes
            with open(dst, "ab") as f:
                f.write(data[start : start + 997])
            new = tail.poll()
            assert all(p.source == src.name for p in new)
            got.extend(new)
    assert got == expected
    assert tail.poll() == []
    assert "no readable record" not in caplog.text  # partial records are not reported
    assert "tensorflow" not in sys.modules


def test_corrupt_record_stops_that_file_only(
    two_segment_logdir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = sorted(two_segment_logdir.glob("events.out.tfevents.*"))
    bad = bytearray(files[0].read_bytes())
    bad[len(bad) // 2] ^= 0xFF
    (tmp_path / files[0].name).write_bytes(bytes(bad))
    shutil.copy(files[1], tmp_path / files[1].name)
    tail = LogDirTail(tmp_path, stall_warn_s=0)
    points = tail.poll()
    first_steps = {p.step for p in points if p.source == files[0].name}
    assert first_steps == set(range(1, max(first_steps) + 1)) and max(first_steps) < 199
    assert max(p.step for p in points if p.source == files[1].name) == 400
    assert "no readable record" in caplog.text and files[0].name in caplog.text
    assert tail.poll() == []  # stays stopped there, reported once
    assert caplog.text.count("no readable record") == 1


def test_reads_file_while_job_appends(tmp_path: Path) -> None:
    proc = subprocess.Popen(_cmd(tmp_path, 300, "--step-sleep-ms", "10",
                                 "--summary-flush-secs", "0.2"),
                            env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    prof = Profiler()
    prof.add_job("live", tmp_path)
    progress = []
    try:
        deadline = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < deadline:
            prof.poll()
            progress.append(prof.job("live").steps_done)
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert proc.returncode == 0
    prof.poll()
    job = prof.job("live")
    mid_run = sorted({s for s in progress if 0 < s < 300})
    assert len(mid_run) >= 3, f"saw no partial progress while the job ran: {progress}"
    assert [s for s, _ in job.losses] == list(range(1, 301))


def _samples(times: dict[tuple[int, Locality], float], n: int = 9) -> list[IterSample]:
    out = []
    for (k, level), t in times.items():
        out += [IterSample(i, t * (1 + 0.01 * (i % 3)), k, level) for i in range(n)]
    return out


def test_estimator_normalises_per_gpu_count_and_per_job() -> None:
    # job a: 1 GPU at 1.0 s (slot), 2 GPUs cross-machine at 0.6 s -> S = 1.2
    # job b (twice as slow serially): 4 GPUs machine at 0.5 s, 4 cross-rack at 0.75 s
    per_job = {
        "a": _samples({(1, Locality.SLOT): 1.0, (2, Locality.RACK): 0.6}),
        "b": _samples({(4, Locality.MACHINE): 0.5, (4, Locality.CLUSTER): 0.75}),
    }
    est = estimate_slowdowns(per_job)
    assert est[Locality.RACK] == pytest.approx(1.2)
    # b's anchor is MACHINE with default S = 1.0, so cross-rack = 0.75 / 0.5
    assert est[Locality.CLUSTER] == pytest.approx(1.5)
    assert Locality.SLOT not in est and Locality.MACHINE not in est


def test_estimator_needs_min_samples_and_falls_back_to_defaults() -> None:
    per_job = {"a": _samples({(1, Locality.SLOT): 1.0}) +
               _samples({(2, Locality.RACK): 0.8}, n=3)}
    assert estimate_slowdowns(per_job, min_samples=5) == {}
    assert DEFAULT.with_observed({}) == DEFAULT
    assert estimate_slowdowns(per_job, min_samples=3)[Locality.RACK] == pytest.approx(1.6)
