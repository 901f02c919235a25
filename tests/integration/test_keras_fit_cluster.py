"""On the dockerised mini-cluster: the plain Keras ``model.fit`` example
(``examples/jobs/keras_fit.py``: Keras' BackupAndRestore and TensorBoard callbacks, no Themis
import; docs/jobs.md, "Keras model.fit") searched by one Themis app, submitted with
``themis submit``; its jobs are moved at lease ends and its promoted trial runs again.

The spec is ``examples/jobs/keras-fit-hyperband-yarn.yaml``, a variant of the standalone
``keras-fit-hyperband.yaml`` (the example itself is unchanged), because on YARN

* a job starts in a container's own working directory: the program must be at one absolute
  path on every NodeManager (``examples/jobs/`` is mounted at ``/opt/themis-examples``);
* the test wants a move it can count on: batches of 4 (461 steps an epoch), and a unit of
  epochs sized to the machine (:func:`unit_epochs_for`, at least 9): before the app, the
  example runs six epochs on a NodeManager and the test times the fastest, then sets
  the unit so that the promoted trial's two more units take at least 1.5 leases (30 s
  here). No run window is longer than a lease, so whatever the phase of the lease grid, a
  run of the promoted trial is stopped at a lease end after it printed an epoch, and the
  trial resumes in a new container. With the spec's fixed 9-epoch unit, a machine that
  trains an epoch in 0.6 s finished the promoted trial inside one lease, and whether the
  first rung's one lease end fell in a run's training or in a TensorFlow start-up was
  timing (it fell in a start-up once, in the project's CI);
* one job at a time (``max_parallel_jobs: 1``): every lease end stops all of the app's
  runs, and three TensorFlow start-ups at once on the 2-core machine took most of each
  30-s lease (the app ran 300 s instead of about 180 s).

The checkpoint directory needs no change: the runner keeps ``$THEMIS_CHECKPOINT_DIR``, where
BackupAndRestore writes, in HDFS across containers.

Hyperband bracket 1 of max_resource 3, eta 3: three trials of one unit (u epochs), then the
best one promoted to 3u epochs. From the AM's status, its log (which run of which job ran in which
container, and why each was stopped), the containers' ``launch_container.sh`` (each run's
``THEMIS_MAX_STEPS``) and stdout (Keras prints ``Epoch a/b`` when an epoch begins and one
line when it ends) and the TensorBoard event files the runners copied to HDFS (``themis
logs --tensorboard``), the test checks that

* the app SUCCEEDED, every trial has a finite objective read from ``validation/epoch_loss``
  (one of the values its event files hold), no run failed;
* a run was stopped at a lease end before its target, after one or more epochs, and its job
  resumed in another container; the promoted trial's first run of its new rung began at
  epoch 10 (after its 9-epoch rung);
* every run of a job resumed from its backup: its first epoch is the one after the last
  epoch that the job's earlier runs completed (or one later: a run killed between Keras'
  backup and the epoch's printed line), never epoch 1 again; in the event files no epoch
  is logged twice and the optimizer's step (``evaluation_loss_vs_iterations``) only grows;
* no run trained past its step target (``THEMIS_MAX_STEPS`` of its container) by more than
  one epoch, and every trial ended exactly at its last target;
* every trial's objective is the value of its last epoch, and the rung promoted the trial
  whose value at the rung's end ranks best.

About 4 minutes on the 2-core development VM (AMD EPYC, 0.45 s an epoch: a 50-epoch unit,
the app 3.5 min), the cluster's start included; where an epoch takes 2-3 s the unit stays
9 epochs and the test took about as long (251 s).

Environment: as tests/integration/minicluster.py (THEMIS_IT_MOUNT_SRC=1: this checkout's
``themis/`` over the images' package).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.minicluster import (
    NMS,
    ROOT,
    am_jar_and_mounts,
    docker_exec,
    exec_argv,
    running_minicluster,
    shell_read,
    themis,
)

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(900)]

SPEC = ROOT / "examples" / "jobs" / "keras-fit-hyperband-yarn.yaml"
EXAMPLES = {str(ROOT / "examples" / "jobs"): "/opt/themis-examples"}
STEPS_PER_EPOCH = 461  # ceil(1843 training examples / batch 4): keras_fit.py --batch-size 4
LEASE_MS = 30000
OVERRIDES = {
    "yarn.resourcemanager.themis.lease-duration-ms": str(LEASE_MS),
    "yarn.resourcemanager.themis.grace-period-ms": "10000",
    "yarn.resourcemanager.themis.agent-port": "8642",
    # no renewal in place: a job that crosses a lease end must stop, checkpoint and resume
    # (the path checked here), not go on because its app won its GPUs back
    "yarn.resourcemanager.themis.renew-ahead-ms": "0",
}
APP_TIMEOUT_S = 600
#: the promoted trial's last two units must take this many leases (module docstring)
PROMOTED_LEASES = 1.5
#: the unit's bounds, in epochs: the spec's own unit, and a cap on a very fast machine
MIN_UNIT_EPOCHS, MAX_UNIT_EPOCHS = 9, 60
#: epochs of the calibration run (:func:`epoch_seconds`)
CALIBRATION_EPOCHS = 6


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    with running_minicluster("kerasfit", conf_overrides=OVERRIDES,
                             mounts={**(am_jar_and_mounts() or {}), **EXAMPLES}) as c:
        yield c


# ----------------------------------------------------------------------------- reading
def app_files(cluster: dict[str, Any], app: str) -> dict[tuple[str, str], str]:
    """(container, file name) -> text of every log file of the app's containers on every
    NodeManager (``stdout``, ``stderr``, ``AppMaster.stderr``, ``launch_container.sh``...)."""
    out: dict[tuple[str, str], str] = {}
    for c in cluster["containers"]:
        w = c.get_wrapped_container()
        if not any(f"-{n}-" in w.name for n in NMS):
            continue
        text = shell_read(w, f"for f in /data/nm-logs/{app}/*/*; do "
                             "[ -f \"$f\" ] && echo \"=== $f\" && cat \"$f\"; done",
                          f"the container logs of {app}")
        key: tuple[str, str] | None = None
        for line in text.splitlines():
            m = re.match(rf"=== /data/nm-logs/{app}/(\S+)/(\S+)$", line)
            if m:
                key = (m[1], m[2])
                out[key] = ""
            elif key is not None:
                out[key] += line + "\n"
    return out


def dump_logs(cluster: dict[str, Any], files: dict[tuple[str, str], str]) -> str:
    parts = []
    for c in cluster["containers"]:
        w = c.get_wrapped_container()
        if "-rm-" in w.name:
            parts.append(f"==== {w.name}\n" + w.logs(tail=40).decode(errors="replace"))
    for (cid, name), text in sorted(files.items()):
        if name in ("AppMaster.stderr", "stdout", "stderr"):
            parts.append(f"==== {cid}/{name}\n" + "\n".join(text.splitlines()[-40:]))
    return "\n".join(parts)


@dataclass
class Run:
    """One container of a job, from the AM's log and the container's stdout."""

    job: str
    run_id: int
    container: str
    stop_reason: str = ""
    target: int | None = None  # THEMIS_MAX_STEPS of the container
    first_epoch: int | None = None  # "Epoch a/b" of the first epoch begun (1-based)
    epochs: int | None = None  # b: the epochs fit was asked for
    completed: list[int] = field(default_factory=list)  # epochs whose end line was printed

    @property
    def last_completed(self) -> int:
        """The job's epoch count when this run ended (what it trained to)."""
        if self.completed:
            return self.completed[-1]
        return (self.first_epoch or 1) - 1


def parse_runs(files: dict[tuple[str, str], str]) -> list[Run]:
    am_log = next((t for (_, n), t in files.items() if n == "AppMaster.stderr"), "")
    runs: dict[str, Run] = {}
    for m in re.finditer(r"launching (\S+) \(run (\d+)\) in (container_\S+) on ", am_log):
        runs[m[3]] = Run(m[1], int(m[2]), m[3])
    for m in re.finditer(r"stopping (\S+) in (container_\S+) on \S+: (.+)", am_log):
        if m[2] in runs:
            runs[m[2]].stop_reason = m[3].strip()
    for run in runs.values():
        launch = files.get((run.container, "launch_container.sh"), "")
        t = re.search(r"export THEMIS_MAX_STEPS=\"?(\d+)", launch)
        run.target = int(t[1]) if t else None
        current: int | None = None
        for line in files.get((run.container, "stdout"), "").splitlines():
            e = re.match(r"Epoch (\d+)/(\d+)$", line.strip())
            if e:
                current = int(e[1])
                if run.first_epoch is None:
                    run.first_epoch, run.epochs = current, int(e[2])
            elif current is not None and re.match(r"\d+/\d+ - ", line.strip()):
                run.completed.append(current)
    return sorted(runs.values(), key=lambda r: r.run_id)


def wait_for_end(app: str) -> dict[str, Any]:
    """``themis status APP --json`` once the app has ended (the last one seen otherwise)."""
    doc: dict[str, Any] = {}
    deadline = time.monotonic() + APP_TIMEOUT_S
    while time.monotonic() < deadline:
        r = themis("status", app, "--json", timeout=60)
        if r.returncode == 0:  # the RM's REST API can be slow on a loaded 2-core machine
            doc = json.loads(r.stdout)
            if doc["app"]["state"] in ("FINISHED", "FAILED", "KILLED"):
                return doc
        time.sleep(3)
    return doc


def epoch_seconds(cluster: dict[str, Any]) -> float:
    """Seconds one epoch of the example takes on a NodeManager (batches of 4), at the
    fastest: it runs ``CALIBRATION_EPOCHS`` epochs there (outside YARN, with a scratch log
    and backup directory) and takes the shortest time between two ``Epoch a/b`` lines (Keras
    prints one as an epoch begins) after the first epoch. The shortest, because the app's
    epochs may run faster than these: the cluster is still warming up when they run (one
    such calibration took 1.08 s an epoch where the app's ran at 0.6 s)."""
    nm = next(c.get_wrapped_container() for c in cluster["containers"]
              if "-nm1-" in c.get_wrapped_container().name)
    d = "/tmp/epoch-calibration"
    cmd = (f"rm -rf {d} && mkdir -p {d} && cd {d} && THEMIS_LOGDIR={d}/logs "
           f"THEMIS_CHECKPOINT_DIR={d}/ckpt "
           f"THEMIS_MAX_STEPS={CALIBRATION_EPOCHS * STEPS_PER_EPOCH} "
           "exec python3 -u /opt/themis-examples/keras_fit.py --batch-size 4")
    begun: list[float] = []
    with subprocess.Popen(exec_argv(nm, ["sh", "-c", cmd]),
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL) as run:
        assert run.stdout is not None
        for line in run.stdout:  # read as printed: an epoch's time is when its line came
            if re.match(r"Epoch \d+/\d+$", line.decode(errors="replace").strip()):
                begun.append(time.monotonic())
    docker_exec(nm, ["rm", "-rf", d])
    assert len(begun) == CALIBRATION_EPOCHS, \
        f"the calibration run printed {len(begun)} of its {CALIBRATION_EPOCHS} epochs"
    return min(b - a for a, b in itertools.pairwise(begun[1:]))


def unit_epochs_for(epoch_s: float) -> int:
    """Epochs a Hyperband unit must have for the promoted trial's last two units (its run
    after the rung) to take ``PROMOTED_LEASES`` leases at ``epoch_s`` an epoch."""
    need = math.ceil(PROMOTED_LEASES * LEASE_MS / 1000 / 2 / max(epoch_s, 1e-3))
    return min(MAX_UNIT_EPOCHS, max(MIN_UNIT_EPOCHS, need))


# ------------------------------------------------------------------------------- the test
def test_model_fit_app_moves_and_resumes_from_its_backups(cluster: dict[str, Any],
                                                          tmp_path: Path) -> None:
    from themis.am.specfile import load_spec
    from themis.profiler import LogDirTail

    assert load_spec(SPEC).hyperband.steps_per_unit % STEPS_PER_EPOCH == 0  # epoch-aligned
    epoch_s = epoch_seconds(cluster)
    unit_epochs = unit_epochs_for(epoch_s)
    text = SPEC.read_text()
    assert re.search(r"(?m)^  steps_per_unit: \d+$", text), "the spec's unit line moved"
    spec_file = tmp_path / SPEC.name
    spec_file.write_text(re.sub(r"(?m)^  steps_per_unit: \d+$",
                                f"  steps_per_unit: {unit_epochs * STEPS_PER_EPOCH}", text))
    assert load_spec(spec_file).hyperband.steps_per_unit == unit_epochs * STEPS_PER_EPOCH
    t0 = time.monotonic()
    r = themis("submit", str(spec_file))
    assert r.returncode == 0, (r.stdout, r.stderr)
    app = r.stdout.strip().splitlines()[-1]
    doc = wait_for_end(app)
    took = time.monotonic() - t0
    files = app_files(cluster, app)
    state = f"{doc.get('app', {}).get('state')}/{doc.get('app', {}).get('finalStatus')}"
    assert state == "FINISHED/SUCCEEDED", (state, dump_logs(cluster, files))
    status = doc["status"]
    jobs = {j["id"]: j for j in status["jobs"]}
    runs = parse_runs(files)
    # what the runners did at each stop (the hold before the SIGTERM, each checkpoint save)
    stops = [f"{cid}: {line}" for (cid, name), text in sorted(files.items()) if name == "stderr"
             for line in text.splitlines()
             if "SIGTERM to process group" in line or "checkpoint" in line.lower()]
    why = json.dumps({"jobs": status["jobs"], "runs": [r.__dict__ for r in runs],
                      "reallocations": status.get("reallocations"), "stops": stops[-60:]},
                     indent=1)
    # in full in the failure's captured stderr (pytest shortens an assertion's message)
    print(why, file=sys.stderr)

    # --- every trial has a finite objective, from Keras' validation run; none failed
    assert len(jobs) == 3, why
    for j in jobs.values():
        assert j["loss"] is not None and math.isfinite(j["loss"]), why
        assert j["objective_source"] == "validation/epoch_loss", why
        assert not j["missing_objective"] and j["failures"] == 0 and not j["gave_up"], why
    promoted = [k for k, j in jobs.items() if j["rung"] == 1]
    assert len(promoted) == 1 and status["best"]["id"] == promoted[0], why

    # --- every container of a job, in run order (a run stopped before fit began, e.g.
    #     while TensorFlow imported, printed no epoch: it restored nothing and trained
    #     nothing)
    trained = [r for r in runs if r.first_epoch is not None]
    assert {r.job for r in runs} == set(jobs), why
    for job_id, j in jobs.items():
        done = 0  # epochs the job's earlier runs completed
        for run in (r for r in trained if r.job == job_id):
            assert run.first_epoch is not None and run.epochs is not None
            # resumed from its backup: at the epoch after the last completed one (one
            # later if it was killed between Keras' backup and the epoch's printed line)
            assert done <= run.first_epoch - 1 <= done + 1, (job_id, run, why)
            # trained no further than its step target plus one epoch
            assert run.target is not None, (run, "no THEMIS_MAX_STEPS in launch_container.sh")
            assert run.epochs == math.ceil(run.target / STEPS_PER_EPOCH), (run, why)
            assert run.last_completed * STEPS_PER_EPOCH <= run.target + STEPS_PER_EPOCH, \
                (run, why)
            done = max(done, run.last_completed)
        # the trial ended exactly at its last target: one unit, three for the promoted one
        # (by the printed lines one epoch short when its last run was stopped between
        # Keras' backup and the epoch's line: a run after it restored that backup, at the
        # target, and had no epoch left to print; the event files below hold every epoch)
        last = max(r.run_id for r in trained if r.job == job_id)
        restored_at_end = any(r.job == job_id and r.run_id > last for r in runs)
        assert done * STEPS_PER_EPOCH == j["target_steps"] or (
            restored_at_end and (done + 1) * STEPS_PER_EPOCH == j["target_steps"]), \
            (job_id, done, why)
        assert j["target_steps"] == unit_epochs * STEPS_PER_EPOCH * (
            3 if job_id in promoted else 1), why

    # --- moves: a run stopped at a lease end before its target, after one or more epochs,
    #     and its job resumed in a new container (the checks above: at the next epoch); the
    #     promoted trial ran again after its rung, from the epoch after it
    def next_run(run: Run) -> Run | None:
        return next((x for x in trained if x.job == run.job and x.run_id > run.run_id), None)

    at_lease_end = [r for r in trained
                    if re.match(r"lease on \S+ ends|preempted", r.stop_reason)
                    and r.target is not None
                    and r.last_completed * STEPS_PER_EPOCH < r.target and next_run(r)]
    moved = [(r, n) for r in at_lease_end if (n := next_run(r)) and (n.first_epoch or 1) > 1]
    assert moved, ("no run was stopped at a lease end after an epoch and resumed", why)
    assert status.get("reallocations"), why
    rung1 = [r for r in trained if r.job == promoted[0] and r.first_epoch == unit_epochs + 1]
    assert rung1, (f"the promoted trial never resumed at epoch {unit_epochs + 1}", why)

    # --- the event files in HDFS: no epoch logged twice, the optimizer's step only grows,
    #     and never more than one epoch past the trial's target
    dest = tmp_path / "tb"
    r = themis("logs", app, "--tensorboard", "--dest", str(dest))
    assert r.returncode == 0, r.stderr
    logged: dict[str, list[float]] = {}
    by_epoch: dict[str, dict[int, float]] = {}  # validation/epoch_loss by epoch (0-based)
    for job_id, j in jobs.items():
        points = LogDirTail(dest / job_id).poll()
        logged[job_id] = [p.value for p in points if p.qualified_tag == "validation/epoch_loss"]
        epochs = [p.step for p in points if p.qualified_tag == "train/epoch_loss"]
        assert len(epochs) == len(set(epochs)), (job_id, "an epoch was trained twice", epochs)
        assert max(epochs) + 1 == j["target_steps"] // STEPS_PER_EPOCH, (job_id, epochs)
        iters = [p.step for p in points
                 if p.qualified_tag == "validation/evaluation_loss_vs_iterations"]
        assert iters == sorted(iters), (job_id, "the optimizer's step went back", iters)
        # A step logged twice: a run stopped after the epoch's validation (whose
        # evaluation_*_vs_iterations points Keras writes first) and before the epoch's
        # backup lost that epoch; the next run of the job restored the backup before it
        # and trained the epoch again, from its start (train/epoch_loss, written after
        # the backup, is logged once: checked above)
        starts = {r.first_epoch for r in trained if r.job == job_id}
        for step in {x for x in iters if iters.count(x) > 1}:
            assert iters.count(step) == 2 and step // STEPS_PER_EPOCH in starts, \
                (job_id, "a step logged twice without a run that trained its epoch again",
                 step, sorted(starts), iters, why)
        assert iters[-1] <= j["target_steps"] + STEPS_PER_EPOCH, (job_id, iters)
        losses = logged[job_id]
        assert losses and all(math.isfinite(v) for v in losses), (job_id, losses)
        # the trial's objective is its last epoch's value (a rung is decided when a run
        # has ended, never on the value of the epoch before: themis/am/core.py)
        by_epoch[job_id] = {p.step: p.value for p in points
                            if p.qualified_tag == "validation/epoch_loss"}
        assert math.isclose(j["loss"], by_epoch[job_id][max(by_epoch[job_id])],
                            rel_tol=1e-6), (job_id, by_epoch[job_id], j["loss"])
        # one event file per run that trained (a run killed before its first flush may
        # leave none with a value)
        segments = {p.source for p in points if p.run == "train"}
        assert len(segments) <= len([r for r in trained if r.job == job_id]), (job_id, why)
        assert len(segments) >= (2 if job_id in promoted else 1), (job_id, segments, why)

    # --- the rung promoted the trial whose value at the rung's end ranks best
    at_rung_end = by_epoch[promoted[0]][unit_epochs - 1]
    assert all(at_rung_end <= j["loss"] for k, j in jobs.items() if k != promoted[0]), \
        (at_rung_end, {k: j["loss"] for k, j in jobs.items()})

    print(json.dumps({
        "app": app, "took_s": round(took, 1), "epoch_s": round(epoch_s, 2),
        "unit_epochs": unit_epochs,
        "runs": [{"job": r.job, "run": r.run_id, "target": r.target,
                  "epochs": f"{r.first_epoch}..{r.last_completed} of {r.epochs}",
                  "stop": r.stop_reason} for r in runs],
        "lease_end_moves": [f"{r.job}: run {r.run_id} (epochs {r.first_epoch}.."
                            f"{r.last_completed}) -> run {n.run_id} from epoch {n.first_epoch}"
                            for r, n in moved],
        "objective": {k: {"status": j["loss"], "logged": logged[k][-3:]}
                      for k, j in jobs.items()},
        "promoted": promoted[0]}, indent=1))
