"""On the dockerised mini-cluster: a job submitted the way a Submarine user writes it.

``themis job run`` with Submarine's flags and a ``--worker_launch_cmd`` that uses only
Submarine's ``%checkpoint_path%`` and the job contract's ``$THEMIS_MAX_STEPS`` (no Themis
placeholder, no Themis import; docs/jobs.md, docs/am.md "themis job run"). The command
counts steps, resumes from the step stored in ``%checkpoint_path%`` and stores each one
there. Checks: the client exits 0 with ``--wait_job_finish``, the app SUCCEEDED, the job ran
to its ``--max_steps``, and the job's local checkpoint directory reached HDFS (the runner
mirrors ``%checkpoint_path%``, which defaults to ``{checkpoint_dir}``, to
``/user/<u>/.themis/<app>/ckpt-dir/<job>/`` after the job exits) holding the final step.

Environment: as tests/integration/minicluster.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.minicluster import NN, am_jar_and_mounts, running_minicluster, themis

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(600)]

AGENT_PORT = 8642
MAX_STEPS = 30
# what a Submarine user would write: a shell job with %checkpoint_path%, nothing of Themis
CMD = ('d=%checkpoint_path%; mkdir -p "$d"; s=$(cat "$d/step" 2>/dev/null || echo 0); '
       'echo "submarine-job starts at $s of $THEMIS_MAX_STEPS in $d" >&2; '
       'while [ "$s" -lt "$THEMIS_MAX_STEPS" ]; do sleep 0.2; s=$((s + 1)); '
       'echo "$s" > "$d/step"; done')


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    with running_minicluster("jobrun", conf_overrides={
            "yarn.resourcemanager.themis.agent-port": str(AGENT_PORT)},
            mounts=am_jar_and_mounts()) as c:
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
