"""Themis apps of two users on the Kerberos-secured mini-cluster (``running_minicluster(
secure=True)``: an MIT KDC, SPNEGO on every web endpoint, HDFS permissions, YARN ACLs and
queue ACLs; docs/install.md, "Security and Kerberos").

Users ``alice`` and ``bob`` each hold a ticket (``kinit`` with their keytabs, each in a
credentials cache of their own) and run ``themis`` on this machine, as a user of the
cluster would:

* ``themis submit`` without a ticket ends with one line that says ``run kinit`` (exit 2);
* alice submits a Hyperband app of real TensorFlow jobs to her queue and then destroys her
  ticket (``kdestroy``): the app runs on the delegation tokens its submission carried;
  bob submits a Themis app to his queue and a stock MapReduce job whose maps ask GPUs; the
  apps compete for the GPUs through leases (40-s leases, f = 0), jobs move at lease ends;
* everything ends SUCCEEDED; alice's app files, checkpoints and TensorBoard event files
  in HDFS are hers (owner alice, her home, no access for others) and her jobs resumed
  from their checkpoints after moves;
* bob can neither kill alice's app (YARN's MODIFY_APP ACL) nor read her checkpoints (HDFS
  permissions), each refused with a message that says why; bob cannot submit to alice's
  queue; admin (``yarn.admin.acl``) can kill bob's second app.

Then, on the same cluster, the profile itself (docs/minicluster.md, "Secure profile"), from
the machine (curl --negotiate with each user's keytab and the generated krb5.conf): the RM's
REST API answers alice and refuses a caller without a ticket; WebHDFS lists alice's home for
alice and refuses bob. In a container (kinit, then ``themis-daemon client``): a stock
MapReduce job of bob's runs in queue bob, and bob's job for queue alice is refused by the
queue ACL. MapReduce's shuffle does not work in this profile (no libhadoop native code in the
images, DefaultContainerExecutor): the job is the map-only ``teragen``; the test with ``pi``
is an expected failure that says so. (One cluster for both parts: a secure cluster takes
about a minute to start and stop.)

Environment: as tests/integration/minicluster.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.minicluster import (
    ADDR,
    NN,
    RM,
    ROOT,
    am_jar_and_mounts,
    docker_exec,
    exec_argv,
    hosts,
    kinit,
    negotiate,
    running_minicluster,
)

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(1200)]
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

EXAMPLES = "org.apache.hadoop.examples.ExampleDriver"

LEASE_MS = 40000
OVERRIDES = {
    "yarn.resourcemanager.themis.lease-duration-ms": str(LEASE_MS),
    "yarn.resourcemanager.themis.grace-period-ms": "10000",
    "yarn.resourcemanager.themis.fairness-knob": "0.0",
    # no renewal in place: a job that crosses a lease end must stop, checkpoint and resume
    # (the path checked here), not go on because its app won its GPUs back
    "yarn.resourcemanager.themis.renew-ahead-ms": "0",
}
# alice: Hyperband s=1 of max_resource 9, eta 3 (as test_am_e2e.py): 5 jobs of 120 steps,
# then the best one promoted to 360 steps at 250 ms a step, longer than a 40-s lease, so
# her last job crosses a lease end (stop, checkpoint to HDFS, resume)
ALICE_SPEC = """\
name: alice-hb
queue: alice
search_space:
  learning_rate: {type: double, min: 1.0e-3, max: 3.0e-1, scale: log}
  hidden_units: {type: int, min: 16, max: 64, scale: log}
hyperband: {max_resource: 9, eta: 3, steps_per_unit: 40, brackets: [1], seed: 1}
job:
  command: >-
    python3 -m themis.jobs.train --job-id {job_id} --logdir {logdir}
    --max-steps {max_steps} --checkpoint-uri {checkpoint_uri} --checkpoint-every 40
    --learning-rate {learning_rate} --hidden-units {hidden_units}
    --step-sleep-ms 250 --eval-every 40 --seed {seed}
resources: {gpus: 1, memory_mb: 512, vcores: 1}
am: {memory_mb: 512, max_attempts: 2}
"""
# bob: a small Themis app of 2-GPU jobs (steps and checkpoint URI passed to `true`)
BOB_SPEC = """\
name: {name}
queue: bob
search_space:
  learning_rate: {{type: double, min: 1.0e-3, max: 3.0e-1, scale: log}}
hyperband: {{max_resource: 3, eta: 3, steps_per_unit: 10, brackets: [1], seed: 2}}
objective: {{optional: true}}  # the jobs write no event files: nothing to rank
job:
  command: >-
    sleep {sleep} && true {{max_steps}} {{checkpoint_uri}}
resources: {{gpus: 2, memory_mb: 256, vcores: 1}}
am: {{memory_mb: 512, max_attempts: 1}}
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    with running_minicluster("secure", secure=True, conf_overrides=OVERRIDES,
                             mounts=am_jar_and_mounts()) as c:
        yield c


class User:
    """A user of the cluster on this machine: a ticket cache of their own."""

    def __init__(self, name: str, kerberos: dict[str, Any], tmp: Path) -> None:
        self.name, self.kerberos = name, kerberos
        self.ccache = str(tmp / f"{name}.ccache")
        self.env = {**{k: v for k, v in os.environ.items() if k != "HADOOP_USER_NAME"},
                    "KRB5_CONFIG": str(kerberos["krb5_conf"]), "KRB5CCNAME": f"FILE:{self.ccache}",
                    "THEMIS_RM_URL": RM, "THEMIS_WEBHDFS_URL": NN}

    def kinit(self) -> None:
        kinit(self.kerberos, self.name, self.ccache)

    def kdestroy(self) -> None:
        subprocess.run(["kdestroy"], env=self.env, capture_output=True, timeout=30)

    def themis(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "themis", *args], capture_output=True,
                              text=True, timeout=timeout, cwd=ROOT, env=self.env)

    def python(self, code: str) -> subprocess.CompletedProcess[str]:
        """``code`` in a Python of this user's (its last stdout line is JSON)."""
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120, cwd=ROOT, env=self.env)

    def app(self, app_id: str) -> dict[str, Any]:
        r = self.themis("status", app_id, "--json", timeout=60)
        assert r.returncode == 0, r.stderr
        return dict(json.loads(r.stdout))


LIST_HDFS = """
import json, sys
from themis.client.cluster import Cluster
from themis.hadoop.webhdfs import WebHdfsError
fs = Cluster.from_env().hdfs()
try:
    print(json.dumps({"files": [(p, st["owner"], st["permission"])
                                for p, st in fs.files_under(sys.argv[1] if len(sys.argv) > 1
                                                            else %r)],
                      "dir": fs.status(%r)}))
except WebHdfsError as e:
    print(json.dumps({"error": str(e)}))
"""


def _list(user: User, path: str) -> dict[str, Any]:
    r = user.python(LIST_HDFS % (path, path))
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout.strip().splitlines()[-1]))


def _wait_done(user: User, app_id: str, timeout: float) -> dict[str, Any]:
    end = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < end:
        r = user.themis("status", app_id, "--json", timeout=60)
        if r.returncode == 0:
            last = json.loads(r.stdout)
            if last["app"]["state"] in ("FINISHED", "FAILED", "KILLED"):
                return last
        time.sleep(5)
    raise AssertionError(f"{app_id} not done after {timeout} s: {last}")


def _mapreduce_as(cluster: dict[str, Any], user: str, queue: str) -> subprocess.Popen[str]:
    """A stock MapReduce job submitted by ``user`` from the RM host with a ticket from the
    user's keytab: teragen, map-only, its 2 maps asking 1 GPU each. (A job with reducers
    cannot succeed on this mini-cluster under Kerberos: the shuffle's SecureIOUtils needs
    Hadoop's native library and LinuxContainerExecutor; docs/minicluster.md.)"""
    rm = hosts(cluster)["rm"]
    cmd = (f"export KRB5CCNAME=FILE:/tmp/{user}.ccache && kinit -kt /krb/keytabs/{user}.keytab "
           f"{user} && themis-daemon client org.apache.hadoop.examples.ExampleDriver teragen "
           f"-D mapreduce.job.queuename={queue} -D mapreduce.map.resource.yarn.io/gpu=1 "
           f"-D mapreduce.job.maps=2 1000 /user/{user}/teragen-{int(time.time())}")
    return subprocess.Popen(exec_argv(rm, ["bash", "-c", cmd]),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_two_users_share_the_gpus_of_a_kerberos_cluster(cluster: dict[str, Any],
                                                        tmp_path: Path) -> None:
    kerb = cluster["kerberos"]
    alice, bob, admin = (User(n, kerb, tmp_path) for n in ("alice", "bob", "admin"))
    (tmp_path / "alice.yaml").write_text(ALICE_SPEC)
    (tmp_path / "bob.yaml").write_text(BOB_SPEC.format(name="bob-hb", sleep=15))
    (tmp_path / "bob2.yaml").write_text(BOB_SPEC.format(name="bob-long", sleep=600))

    # --- no ticket: one line that says what to do, exit 2, nothing submitted
    r = alice.themis("submit", str(tmp_path / "alice.yaml"))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.strip().endswith("run kinit"), \
        r.stderr

    for u in (alice, bob, admin):
        u.kinit()

    # --- bob may not submit to alice's queue (queue ACL), with YARN's reason
    r = bob.themis("submit", str(tmp_path / "alice.yaml"))
    assert r.returncode == 1 and "alice" in r.stderr, r.stderr
    assert "submit" in r.stderr.lower() or "acl" in r.stderr.lower(), r.stderr

    # --- the apps: alice's Hyperband app, bob's app and his MapReduce job
    r = alice.themis("submit", str(tmp_path / "alice.yaml"))
    assert r.returncode == 0, r.stderr
    a_app = r.stdout.strip().splitlines()[-1]
    alice.kdestroy()  # from here on alice's app lives on its delegation tokens
    assert alice.themis("status", a_app).returncode == 2  # and alice herself has no ticket
    r = bob.themis("submit", str(tmp_path / "bob.yaml"))
    assert r.returncode == 0, r.stderr
    b_app = r.stdout.strip().splitlines()[-1]
    r = bob.themis("submit", str(tmp_path / "bob2.yaml"))
    assert r.returncode == 0, r.stderr
    b_long = r.stdout.strip().splitlines()[-1]
    mr = _mapreduce_as(cluster, "bob", "bob")

    # --- bob can neither kill alice's app nor read her files
    r = bob.themis("kill", a_app)
    assert r.returncode == 1 and "MODIFY_APP" in r.stderr, r.stderr
    seen = _list(bob, f"/user/alice/.themis/{a_app}")
    assert "error" in seen and "Permission denied" in seen["error"], seen
    r = bob.themis("logs", a_app, "--tensorboard", "--user", "alice",
                   "--dest", str(tmp_path / "bob-sees"))
    assert r.returncode == 1 and "Permission denied" in r.stderr, r.stderr

    # --- admin may kill any app (yarn.admin.acl): bob's long one
    r = admin.themis("kill", b_long)
    assert r.returncode == 0, r.stderr

    # --- everything ends well (followed as admin: alice has no ticket any more)
    out, _ = mr.communicate(timeout=900)
    assert mr.returncode == 0 and "completed successfully" in out, out[-3000:]
    finals = {a: _wait_done(admin, a, 900) for a in (a_app, b_app)}
    for a, f in finals.items():
        assert f["app"]["finalStatus"] == "SUCCEEDED", (a, f["app"])
    assert admin.app(b_long)["app"]["finalStatus"] == "KILLED"

    # --- alice's files are hers: owner alice, in her home, closed to others
    alice.kinit()
    st = alice.app(a_app)["status"]
    mine = _list(alice, f"/user/alice/.themis/{a_app}")
    assert mine["dir"]["owner"] == "alice" and mine["dir"]["permission"] == "700", mine["dir"]
    files = mine["files"]
    assert files and all(owner == "alice" for _, owner, _ in files), files
    assert any(p.startswith("ckpt/") for p, _, _ in files), files
    assert any("tfevents" in p for p, _, _ in files), files
    assert dict((p, perm) for p, _, perm in files)["spec.json"] == "600", files
    # --- her jobs moved at lease ends and resumed from their HDFS checkpoints
    moves = st.get("reallocations", [])
    assert moves, "no job of alice's was moved at a lease end"
    assert any((m["restored_step"] or 0) > 0 for m in moves), moves
    # --- the apps competed: each held GPUs through leases at some point
    for a in (a_app, b_app):
        rounds = admin.app(a)["status"].get("rounds", [])
        assert any(rnd["gpus"] for rnd in rounds), (a, rounds)
    print(json.dumps({"moves": moves, "alice_files": len(files)}, indent=1))


# ---------------------------------------------------------------- the secure profile itself
def _as_user(cluster: dict[str, Any], user: str, *args: str) -> tuple[int, str]:
    """``themis-daemon client ARGS`` in the RM's container after ``kinit`` as ``user`` (its
    keytab, mounted at /krb), with a ticket cache of its own."""
    rm = hosts(cluster)["rm"]
    cc = f"FILE:/tmp/{user}-it.ccache"
    cmd = f"kinit -kt /krb/keytabs/{user}.keytab {user} && exec themis-daemon client " + \
        " ".join(args)
    r = docker_exec(rm, ["bash", "-c", cmd], env={"KRB5CCNAME": cc}, merge_stderr=True)
    return r.returncode, r.stdout


def test_rm_rest_needs_a_ticket(cluster: dict[str, Any]) -> None:
    krb = cluster["kerberos"]
    alice = kinit(krb, "alice")
    code, body = negotiate(f"{RM}/ws/v1/cluster/info", alice)
    assert code == 200, body[:500]
    assert json.loads(body)["clusterInfo"]["state"] == "STARTED"
    code, body = negotiate(f"{RM}/ws/v1/cluster/info", None)
    assert code == 401, body[:500]
    # by the RM's host name too (its keytab holds HTTP/rm and HTTP/<address>); the machine
    # does not resolve "rm", so curl is told where it is
    code, body = negotiate("http://rm:8088/ws/v1/cluster/info", alice,
                           curl_args=("--resolve", f"rm:8088:{ADDR['rm']}"))
    assert code == 200, body[:500]


def test_webhdfs_enforces_permissions(cluster: dict[str, Any]) -> None:
    krb = cluster["kerberos"]
    url = f"{NN}/webhdfs/v1/user/alice?op=LISTSTATUS"
    code, body = negotiate(url, kinit(krb, "alice"))
    assert code == 200, body[:500]
    assert "FileStatuses" in json.loads(body)
    code, body = negotiate(url, kinit(krb, "bob"))
    assert code == 403, body[:500]
    assert json.loads(body)["RemoteException"]["exception"] == "AccessControlException", body
    # no ticket, and no way around it with Hadoop's simple-auth user.name parameter
    code, _ = negotiate(url + "&user.name=hdfs", None)
    assert code == 401


def test_bob_runs_a_mapreduce_job_in_his_queue(cluster: dict[str, Any]) -> None:
    out = f"/user/bob/teragen-{id(cluster)}"
    rc, log = _as_user(cluster, "bob", EXAMPLES, "teragen",
                       "-Dmapreduce.job.queuename=bob", "-Dmapreduce.job.maps=2", "1000", out)
    assert rc == 0, log[-3000:]
    assert "completed successfully" in log, log[-3000:]
    admin = kinit(cluster["kerberos"], "admin")
    code, body = negotiate(f"{NN}/webhdfs/v1{out}?op=GETFILESTATUS", admin)
    assert code == 200, body
    assert json.loads(body)["FileStatus"]["owner"] == "bob"
    code, body = negotiate(f"{RM}/ws/v1/cluster/apps?user=bob&states=FINISHED", admin)
    apps = (json.loads(body).get("apps") or {}).get("app", [])
    assert any(a["queue"] == "root.bob" and a["finalStatus"] == "SUCCEEDED" for a in apps), apps


def test_queue_acl_refuses_bob_in_alices_queue(cluster: dict[str, Any]) -> None:
    rc, log = _as_user(cluster, "bob", EXAMPLES, "pi",
                       "-Dmapreduce.job.queuename=alice", "2", "10")
    assert rc != 0, log[-3000:]
    assert "User bob does not have permission to submit" in log, log[-3000:]
    assert "to queue alice" in log, log[-3000:]


@pytest.mark.xfail(strict=True, reason=(
    "no MapReduce shuffle in the secure profile: the NodeManagers' ShuffleHandler opens map "
    "outputs through SecureIOUtils, which with Kerberos needs libhadoop (native code, not in "
    "the Maven jars) and files owned by the job's user (LinuxContainerExecutor)"))
def test_pi_with_a_shuffle(cluster: dict[str, Any]) -> None:
    # one attempt per task: the failure is the shuffle's, not a retry's (and a fixed shuffle
    # would pass in one attempt too)
    rc, log = _as_user(cluster, "bob", EXAMPLES, "pi", "-Dmapreduce.job.queuename=bob",
                       "-Dmapreduce.map.maxattempts=1", "-Dmapreduce.reduce.maxattempts=1",
                       "2", "10")
    assert rc == 0 and "Estimated value of Pi" in log, log[-1500:]
