"""On the dockerised mini-cluster, labeled as admins keep GPU machines apart (docs/yarn.md,
"Partitions (node labels)"): nm1 (4 GPUs) and nm2 (2 GPUs) in the exclusive node label
``gpu``, nm3 without GPUs in the default partition; queue ``ml`` may use ``gpu`` (100 % of
it, and it is the queue's default label), queue ``default`` may not (accessible labels: none).

Checks:

* a Themis app in ``default`` asking ``node_label: gpu`` is refused at submit, naming the
  queue and the setting;
* two competing Themis apps in ``ml`` (one naming ``gpu`` in its spec, one taking the queue's
  default label) and a MapReduce job in ``default`` all succeed; the GPUs change hands
  between the two Themis apps at lease ends;
* every container of the Themis apps (their AMs too) ran on nm1 or nm2, every container of
  the MapReduce job on nm3; every lease was in partition ``gpu``, on nm1 or nm2; no GPU was
  used by two containers at once or outside its app's leases (NodeManager and lease logs);
* ``themis status --all`` shows the partitions while the apps run.

The labels are added with YARN's own admin CLI (``rmadmin -addToClusterNodeLabels``,
``-replaceLabelsOnNode``) once the cluster runs, as an admin would. Labels, queues and GPUs
come from docker/conf/node-labels.json, which ``docker/minicluster.sh up --labels`` reads too.
About 4 minutes on the 2-core development VM.

Environment: as tests/integration/minicluster.py.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.minicluster import (
    NMS,
    am_jar_and_mounts,
    docker_exec,
    label_admin_args,
    node_label_profile,
    running_minicluster,
    themis,
)
from tests.integration.stockapps import (
    Client,
    app_report,
    gpu_use_violations,
    hyperband_spec,
    nm_logs,
    rm_log,
    themis_state,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(1200)]

LEASE_MS = 30000
GRACE_MS = 5000
PROFILE = node_label_profile()  # the labels, queues and CPU-only nm3 of up --labels
OVERRIDES = {
    "yarn.resourcemanager.themis.lease-duration-ms": str(LEASE_MS),
    "yarn.resourcemanager.themis.grace-period-ms": str(GRACE_MS),
    "yarn.resourcemanager.themis.agent-port": "8642",
    **PROFILE["yarn_site"],
}
QUEUES: dict[str, str] = PROFILE["capacity_scheduler"]
NM_GPUS: dict[str, int] = PROFILE["nm_gpus"]
# the labeled NodeManagers (nm1 and nm2 in gpu) and their GPUs
GPU_NODES = {n: NM_GPUS.get(n, NMS[n][0]) for n in PROFILE["nodes"]}
PLAIN_NODES = sorted(set(NMS) - set(GPU_NODES))  # nm3, the default partition
# stockapps.hyperband_spec's jobs (three 2-GPU jobs, then the best one again), 15 s each
JOB = "sleep 15 && true {max_steps} {checkpoint_uri}"


def _admin(rm: Any, *args: str) -> str:
    r = docker_exec(rm, ["themis-daemon", "client",
                         "org.apache.hadoop.yarn.client.cli.RMAdminCLI", *args],
                    env={"HADOOP_USER_NAME": "root"}, merge_stderr=True)
    assert r.returncode == 0, (args, r.stdout[-2000:])
    return r.stdout


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    with running_minicluster("labels", conf_overrides=OVERRIDES, cs_overrides=QUEUES,
                             nm_gpus=NM_GPUS, mounts=am_jar_and_mounts()) as c:
        rm = next(x for x in c["containers"] if "-rm-" in x.get_wrapped_container().name)
        c["rm"] = rm.get_wrapped_container()
        for args in label_admin_args(PROFILE):
            _admin(c["rm"], *args)

        def labeled() -> bool:
            nodes = {n["node_id"].split(":")[0]: n for n in themis_state()["nodes"]}
            return all(nodes.get(h, {}).get("partition") == PROFILE["nodes"][h]
                       for h in GPU_NODES) \
                and all(nodes.get(h, {}).get("partition") == "" for h in PLAIN_NODES)
        wait_for("nm1 and nm2 in partition gpu", 60, labeled)
        yield c


def _spec(tmp_path: Path, name: str, seed: int, extra: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(hyperband_spec(name, seed, JOB) + extra)
    return path


def _containers_by_host(logs: dict[str, str]) -> dict[str, set[str]]:
    """app id -> the NodeManager hosts that started any of its containers."""
    out: dict[str, set[str]] = {}
    for host, text in logs.items():
        for m in re.finditer(r"Start request for container_(\d+)_(\d+)_\d+_\d+ ", text):
            out.setdefault(f"application_{m[1]}_{m[2]}", set()).add(host)
    return out


def test_partitions_keep_gpu_apps_and_other_work_apart(cluster: dict[str, Any],
                                                       tmp_path: Path) -> None:
    # --- refused at submit: queue default may not use gpu
    refused = _spec(tmp_path, "hb-refused", 9, "queue: default\nnode_label: gpu\n")
    r = themis("submit", str(refused))
    assert r.returncode != 0, (r.stdout, r.stderr)
    assert "queue 'default' may not use it" in r.stderr, r.stderr

    # --- two Themis apps in ml (one naming the label, one by the queue's default label) and
    #     a MapReduce job in default
    apps = []
    for i, extra in enumerate(("queue: ml\nnode_label: gpu\n", "queue: ml\n")):
        rr = themis("submit", str(_spec(tmp_path, f"hb-{i}", i, extra)))
        assert rr.returncode == 0, (rr.stdout, rr.stderr)
        apps.append(rr.stdout.strip().splitlines()[-1])
    pi = Client(cluster["rm"], "org.apache.hadoop.examples.ExampleDriver", "pi", "2", "20")
    pi.start()

    # --- while they run: themis status --all shows the partitions, leases only in gpu
    shown, lease_nodes = "", set()
    end = time.monotonic() + 240
    while time.monotonic() < end:
        st = themis_state()
        for lease in st["leases"]:
            assert lease["partition"] == "gpu", lease
            lease_nodes.add(lease["node_id"].split(":")[0])
        if not shown:
            s = themis("status", "--all")
            if s.returncode == 0 and "partition gpu: 6 GPUs on 2 nodes" in s.stdout:
                shown = s.stdout
        if all(app_report(a)["state"] in ("FINISHED", "FAILED", "KILLED") for a in apps):
            break
        time.sleep(2)
    assert shown, "themis status --all never showed partition gpu"
    assert "partition <default>: 0 GPUs on 1 node" in shown, shown
    assert lease_nodes and lease_nodes <= set(GPU_NODES), lease_nodes

    for a in apps:
        done = wait_for(f"{a} to finish", 300, lambda a=a: (
            x if (x := app_report(a))["state"] in ("FINISHED", "FAILED", "KILLED") else None), 5)
        assert done["finalStatus"] == "SUCCEEDED", done
    pi.join(timeout=600)
    assert pi.code == 0, pi.out[-3000:]
    assert "Estimated value of Pi is" in pi.out, pi.out[-2000:]

    # --- where everything ran, from the NodeManagers' logs and the lease log
    logs = nm_logs(cluster)
    hosts = _containers_by_host(logs)
    for a in apps:
        assert hosts.get(a) and hosts[a] <= set(GPU_NODES), (a, hosts.get(a))
    mr = [a for a in hosts if a not in apps]
    assert mr and all(hosts[a] == set(PLAIN_NODES) for a in mr), hosts
    rm_text = rm_log(cluster)
    granted = re.findall(r"Themis lease \d+: \d+ GPU\(s\) on (\S+?):\d+ to (\S+) until",
                         rm_text)
    assert granted and {h for h, _ in granted} <= set(GPU_NODES), granted
    # the GPUs changed hands: a node leased to both apps over time
    holders: dict[str, set[str]] = {}
    for h, app in granted:
        holders.setdefault(h, set()).add(app)
    assert any(set(apps) <= got for got in holders.values()), holders
    bad = gpu_use_violations({h: logs[h] for h in GPU_NODES}, GPU_NODES, rm_text,
                             lease_s=LEASE_MS / 1000, grace_s=GRACE_MS / 1000)
    assert not bad, bad
    print(json.dumps({"apps": apps, "hosts": {k: sorted(v) for k, v in hosts.items()},
                      "leases": len(granted)}, indent=1))
