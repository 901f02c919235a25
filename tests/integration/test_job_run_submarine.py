"""On the dockerised mini-cluster: jobs submitted the way a Submarine user writes them.

``themis job run`` with Submarine's flags and a ``--worker_launch_cmd`` that uses only
Submarine's ``%checkpoint_path%`` and the job contract's ``$THEMIS_MAX_STEPS`` (no Themis
placeholder, no Themis import; docs/jobs.md, docs/am.md "themis job run"). The command
counts steps, resumes from the step stored in ``%checkpoint_path%`` and stores each one
there. Checks: the client exits 0 with ``--wait_job_finish``, the app SUCCEEDED, the job ran
to its ``--max_steps``, and the job's local checkpoint directory reached HDFS (the runner
mirrors ``%checkpoint_path%``, which defaults to ``{checkpoint_dir}``, to
``/user/<u>/.themis/<app>/ckpt-dir/<job>/`` after the job exits) holding the final step.

A distributed job: ``--num_workers 2`` with the plain Keras MultiWorkerMirroredStrategy
example (``examples/jobs/keras_multiworker.py``, mounted into the containers; no Themis
import): both workers' containers run on one NodeManager host under the app's leases, each
gets its TF_CONFIG from the AM's rendezvous, they train as one cluster (each prints
"2 replicas in sync") and the job reaches its step target; the app SUCCEEDED.

Environment: as tests/integration/minicluster.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.am_kill_trials import OVERRIDES as AM_KILL_OVERRIDES
from tests.integration.am_kill_trials import job_logs, run_trials
from tests.integration.minicluster import (
    NMS,
    NN,
    ROOT,
    am_jar_and_mounts,
    running_minicluster,
    themis,
)

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(600)]

MAX_STEPS = 30
EXAMPLES = {str(ROOT / "examples" / "jobs"): "/opt/themis-examples"}
# what a Submarine user would write: a shell job with %checkpoint_path%, nothing of Themis
CMD = ('d=%checkpoint_path%; mkdir -p "$d"; s=$(cat "$d/step" 2>/dev/null || echo 0); '
       'echo "submarine-job starts at $s of $THEMIS_MAX_STEPS in $d" >&2; '
       'while [ "$s" -lt "$THEMIS_MAX_STEPS" ]; do sleep 0.2; s=$((s + 1)); '
       'echo "$s" > "$d/step"; done')


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    # 30 s leases and up to 10 AM attempts: the AM-kill trials' settings (am_kill_trials.py)
    with running_minicluster("jobrun", conf_overrides=AM_KILL_OVERRIDES,
            mounts={**(am_jar_and_mounts() or {}), **EXAMPLES}) as c:
        yield c


def test_submarine_style_job_run_checkpoints_to_hdfs(cluster: dict[str, Any]) -> None:
    from hdfs import InsecureClient

    r = themis("job", "run", "--name", "sub-ckpt", "--framework", "tensorflow",
               "--num_workers", "1", "--worker_resources", "memory=512M,vcores=1,gpu=1",
               "--max_steps", str(MAX_STEPS), "--worker_launch_cmd", CMD,
               "--wait_job_finish", timeout=420)
    assert r.returncode == 0, (r.stdout, r.stderr)
    m = re.search(r"application_\d+_\d+", r.stdout + r.stderr)
    assert m, (r.stdout, r.stderr)
    app = m[0]

    st = themis("status", app, "--json", timeout=60)
    assert st.returncode == 0, st.stderr
    doc = json.loads(st.stdout)
    assert f"{doc['app']['state']}/{doc['app'].get('finalStatus')}" == "FINISHED/SUCCEEDED", doc
    jobs = (doc.get("status") or {}).get("jobs", [])
    assert len(jobs) == 1, jobs
    job = jobs[0]
    assert job["target_steps"] == MAX_STEPS, job

    fs = InsecureClient(NN, user="root")
    remote = f"/user/root/.themis/{app}/ckpt-dir/{job['id']}/step"
    with fs.read(remote) as f:
        stored = f.read().decode().strip()
    assert stored == str(MAX_STEPS), (remote, stored)


def test_two_worker_job_gets_tf_config_and_trains_as_one_cluster(
        cluster: dict[str, Any]) -> None:
    steps = 40
    r = themis("job", "run", "--name", "mw", "--num_workers", "2",
               "--worker_resources", "memory=1536M,vcores=1,gpu=1", "--max_steps", str(steps),
               "--worker_launch_cmd",
               "python3 /opt/themis-examples/keras_multiworker.py --checkpoint-every 20",
               "--wait_job_finish", timeout=900)
    m = re.search(r"application_\d+_\d+", r.stdout + r.stderr)
    assert m, (r.stdout, r.stderr)
    app = m[0]
    logs = job_logs(cluster, app, "std*")
    assert r.returncode == 0, (r.stdout, r.stderr, logs)
    st = themis("status", app, "--json", timeout=60)
    doc = json.loads(st.stdout)
    assert f"{doc['app']['state']}/{doc['app'].get('finalStatus')}" == "FINISHED/SUCCEEDED", doc
    text = "\n".join(logs.values())
    # every worker of some run joined one 2-worker cluster, and the chief reached the target
    assert "worker 0: 2 replicas in sync" in text, logs
    assert "worker 1: 2 replicas in sync" in text, logs
    assert f"done at step {steps}" in text, logs


def test_docker_image_without_the_nodemanagers_docker_runtime_is_refused(
        cluster: dict[str, Any]) -> None:
    # The mini-cluster's NodeManagers run the DefaultContainerExecutor without the Docker
    # runtime: YARN would ignore the image, so the AM reads every GPU NodeManager's /conf
    # and fails the app naming them and the settings, before any job container starts.
    r = themis("job", "run", "--name", "img", "--docker_image", "tensorflow/tensorflow:2.16.1",
               "--worker_resources", "memory=512M,vcores=1,gpu=1", "--max_steps", "5",
               "--worker_launch_cmd", "echo never runs", "--wait_job_finish", timeout=300)
    m = re.search(r"application_\d+_\d+", r.stdout + r.stderr)
    assert m, (r.stdout, r.stderr)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "yarn.nodemanager.runtime.linux.allowed-runtimes" in r.stdout, r.stdout
    doc = json.loads(themis("status", m[0], "--json", timeout=60).stdout)
    assert f"{doc['app']['state']}/{doc['app'].get('finalStatus')}" == "FINISHED/FAILED", doc
    diag = doc["app"].get("diagnostics", "")
    for nm in NMS:
        assert f"{nm}:" in diag, (nm, diag)  # every GPU NodeManager is named
    assert "LinuxContainerExecutor" in diag, diag
    assert not (doc.get("status") or {}).get("jobs", [{}])[0].get("run"), doc["status"]


def test_killed_application_master_and_job_resume_from_the_last_checkpoint(
        cluster: dict[str, Any], tmp_path: Path) -> None:
    # am_kill_trials.py: an app's AM container is SIGKILLed while its job runs (YARN starts
    # the next attempt, which resumes the job from its checkpoint in HDFS), then the job's
    # processes are (the AM launches it again from its checkpoint)
    result = run_trials(cluster, tmp_path, apps=1, kills_per_app=2, steps=60, seed=1,
                        kinds=("am", "job"))
    s = result.summary()
    print("AM kill trials:", json.dumps(s))
    assert {k: v["trials"] for k, v in s["by_kind"].items()} == {"am": 1, "job": 1}, s
    assert s["lost_checkpoints"] == 0, [t.__dict__ for t in result.trials]
    assert s["job_containers"] >= 3  # the first run and one per kill: the logs were read
    assert not result.double_runs, result.double_runs
    assert not result.gpu_violations, result.gpu_violations
    assert all(v == "FINISHED/SUCCEEDED" for v in result.apps.values()), result.apps
