"""On the dockerised mini-cluster: the jobs' TensorBoard event files are kept in HDFS.

One small app (Hyperband bracket 0: two real TensorFlow jobs of 60 steps, 0.5 s each, so
that the runners' copies every 10 s are seen while the jobs run), submitted with
``themis submit``. While it runs and after it finished, every job has its event files under
``/user/root/.themis/<app>/tensorboard/<job>/`` in HDFS, ``themis logs APP --tensorboard``
downloads them, and they hold each job's losses up to its last step (read by TensorBoard's
reader, as ``tensorboard --logdir`` would). The app's TensorBoard container (spec
``tensorboard``) serves them while the app runs: its URL, published in the AM's status,
answers TensorBoard's ``/data/runs`` with a run per job (fetched from inside the cluster's
network), and the container is released when the app finishes.

Environment: as tests/integration/minicluster.py, plus THEMIS_IT_MOUNT_SRC=1 (this
checkout's ``themis/`` over the images' package, as in test_am_e2e.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.minicluster import (
    am_jar_and_mounts,
    docker_exec,
    running_minicluster,
    themis,
)

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(900)]

AGENT_PORT = 8642
SPEC = """\
name: tb-logs
search_space:
  learning_rate: {type: double, min: 1.0e-3, max: 1.0e-1, scale: log}
hyperband: {max_resource: 3, eta: 3, steps_per_unit: 20, brackets: [0], seed: 1}
job:
  command: >-
    python3 -m themis.jobs.train --job-id {job_id} --logdir {logdir}
    --max-steps {max_steps} --checkpoint-uri {checkpoint_uri} --checkpoint-every 10
    --learning-rate {learning_rate} --step-sleep-ms 500 --eval-every 10
resources: {gpus: 1, memory_mb: 512, vcores: 1}
am: {memory_mb: 512, max_attempts: 1}
tensorboard: {memory_mb: 512}
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    mounts = am_jar_and_mounts()
    with running_minicluster("tblogs", conf_overrides={
            "yarn.resourcemanager.themis.agent-port": str(AGENT_PORT)},
            extra_ports=[AGENT_PORT], mounts=mounts) as c:
        yield c


def _state(app: str) -> tuple[str, dict[str, Any]]:
    """(YARN state/final status, the AM's status)."""
    r = themis("status", app, "--json", timeout=60)
    if r.returncode != 0:
        return "UNKNOWN", {}
    doc = json.loads(r.stdout)
    a = doc["app"]
    return f"{a['state']}/{a.get('finalStatus')}", dict(doc.get("status") or {})


def _runs_served(cluster: dict[str, Any], url: str) -> list[str]:
    """TensorBoard's run names at ``url``, fetched from the RM's host (inside the cluster's
    network, where the NodeManager hosts' names resolve)."""
    rm = next(c.get_wrapped_container() for c in cluster["containers"]
              if "-rm" in c.get_wrapped_container().name)
    code = ("import json,sys,urllib.request;"
            f"print(json.dumps(json.load(urllib.request.urlopen({url + 'data/runs'!r}, "
            "timeout=10))))")
    r = docker_exec(rm, ["python3", "-c", code])
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:  # not served yet: asked again
        return []
    runs: list[str] = json.loads(lines[-1])
    return runs


def _dump_logs(cluster: dict[str, Any]) -> str:
    out = []
    for c in cluster["containers"]:
        w = c.get_wrapped_container()
        out.append(f"==== {w.name}\n" + w.logs(tail=40).decode(errors="replace"))
    return "\n".join(out)


def test_every_jobs_event_files_are_kept_in_hdfs(cluster: dict[str, Any],
                                                 tmp_path: Path) -> None:
    from themis.profiler import LogDirTail

    spec = tmp_path / "tb.yaml"
    spec.write_text(SPEC)
    r = themis("submit", str(spec))
    assert r.returncode == 0, r.stderr
    app = r.stdout.strip().splitlines()[-1]
    dest = tmp_path / "tb"
    during = 0  # event files downloaded while the app ran
    served: list[str] = []  # runs the app's TensorBoard served while the app ran
    tb_url = ""
    state, status = "UNKNOWN", {}
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        state, st = _state(app)
        status = st or status
        if state.split("/")[0] in ("FINISHED", "FAILED", "KILLED"):
            break
        r = themis("logs", app, "--tensorboard", "--dest", str(dest))
        if r.returncode == 0:
            during = max(during, len(list(dest.rglob("events.out.tfevents.*"))))
        tb_url = str((status.get("tensorboard") or {}).get("url") or tb_url)
        if tb_url and len(served) < 2:
            served = _runs_served(cluster, tb_url)
        time.sleep(2)
    assert state == "FINISHED/SUCCEEDED", (state, status, _dump_logs(cluster))
    assert during > 0, "no event file reached HDFS while the app ran"
    tb = status.get("tensorboard") or {}
    assert tb_url.startswith("http://nm"), (tb, _dump_logs(cluster))
    assert tb.get("state") == "stopped", tb  # released when the app finished

    r = themis("logs", app, "--tensorboard", "--dest", str(dest))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(dest)
    jobs = status.get("jobs", [])
    assert len(jobs) == 2, jobs
    for job in jobs:
        job_dir = dest / job["id"]
        files = sorted(job_dir.glob("events.out.tfevents.*"))
        assert files, f"{job['id']}: no event files in {sorted(dest.rglob('*'))}"
        steps = {p.step for p in LogDirTail(job_dir).poll() if p.tag == "loss"}
        assert max(steps) == job["target_steps"] == 60, (job, sorted(steps))
    # the TensorBoard container served a run per job (TensorBoard names a run by its
    # directory under the logdir: the job id)
    assert sorted(served) == sorted(j["id"] for j in jobs), (served, tb)
