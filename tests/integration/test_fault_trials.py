"""On the dockerised mini-cluster: one trial of each host, network and storage fault of
``fault_trials.py`` (issue 35) while competing Themis apps hold the cluster's GPUs: a
NodeManager host killed (``nm-lost``) and one frozen past its liveness expiry
(``nm-paused``) under a running job, the AM's host cut off from the RM host for longer
than a lease (``am-partition``) and slowed by 2 s per round trip to it (``am-latency``),
HDFS's DataNode killed for longer than a lease (``datanode-lost``), its NameNode
restarted (``namenode-restart``), the job's host cut off from HDFS
(``job-hdfs-partition``) and its NodeManager's local directories filled
(``nm-disk-full``). Checks: the job resumed from its last durable checkpoint
after each fault, no job ran in two containers at once, no GPU was used outside a lease or
twice, and every app SUCCEEDED with its job at its last step (docs/am.md, docs/yarn.md
"Faults"). ``bench/bench_faults.py`` runs many trials.

Environment: as tests/integration/minicluster.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.integration.fault_trials import (
    KINDS,
    NM_LOCAL_MB,
    NM_OVERRIDES,
    OVERRIDES,
    run_trials,
)
from tests.integration.minicluster import am_jar_and_mounts, running_minicluster, skip_or_fail

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(1800)]


def test_jobs_survive_a_lost_node_a_frozen_node_and_a_partitioned_am(tmp_path: Path) -> None:
    for tool in ("nsenter", "iptables"):  # am-*: rules in the AM host's namespace
        if shutil.which(tool) is None:
            skip_or_fail(f"{tool} not found on this machine (the am-partition and "
                         "am-latency faults)")
    with running_minicluster("faults", conf_overrides=OVERRIDES,
                             nm_conf_overrides=NM_OVERRIDES, nm_local_mb=NM_LOCAL_MB,
                             mounts=am_jar_and_mounts()) as cluster:
        result = run_trials(cluster, tmp_path, kinds=KINDS, trials=1, apps=1, competitors=3,
                            steps=500, seed=1)
    s = result.summary()
    print("fault trials:", json.dumps(s))
    details = [t.__dict__ for t in result.trials]
    assert {k: v["trials"] for k, v in s["by_kind"].items()} == dict.fromkeys(KINDS, 1), s
    assert s["lost_checkpoints"] == 0, details
    assert not result.double_runs, result.double_runs
    # the frozen host's job was killed by its runner at the thaw (thaw.py), not by its
    # NodeManager's resync a second or more later
    assert s["thaw_kills"] >= 1, s
    assert not result.gpu_violations, result.gpu_violations
    # the AM cut off from the RM host: no lease for its app once its stream is known down
    assert not result.cut_off_grants, result.cut_off_grants
    assert all(v == "FINISHED/SUCCEEDED" for v in result.apps.values()), result.apps
