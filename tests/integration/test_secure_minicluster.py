"""The mini-cluster's secure profile (``running_minicluster(secure=True)``, as
``docker/minicluster.sh up --secure``): a real MIT KDC (realm THEMIS.TEST) on the host ``kdc``,
every daemon logged in with its keytab, SPNEGO on the web endpoints, HDFS permissions and
YARN queue ACLs enforced. docs/minicluster.md, "Secure profile".

From the machine (curl --negotiate with each user's keytab and the generated krb5.conf): the
RM's REST API answers alice and refuses a caller without a ticket; WebHDFS lists alice's home
for alice and refuses bob. In a container (kinit, then ``themis-daemon client``): a stock
MapReduce job of bob's runs in queue bob, and bob's job for queue alice is refused by the
queue ACL. MapReduce's shuffle does not work in this profile (no libhadoop native code in the
images, DefaultContainerExecutor): the job is the map-only ``teragen``; the test with ``pi``
is an expected failure that says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.minicluster import (
    ADDR,
    NN,
    RM,
    hosts,
    kinit,
    negotiate,
    running_minicluster,
)

pytestmark = [pytest.mark.integration, pytest.mark.docker]

EXAMPLES = "org.apache.hadoop.examples.ExampleDriver"


@pytest.fixture(scope="module")
def secure_cluster() -> Iterator[dict[str, Any]]:
    with running_minicluster("sec", secure=True) as c:
        yield c


def _as_user(cluster: dict[str, Any], user: str, *args: str) -> tuple[int, str]:
    """``themis-daemon client ARGS`` in the RM's container after ``kinit`` as ``user`` (its
    keytab, mounted at /krb), with a ticket cache of its own."""
    rm = hosts(cluster)["rm"]
    cc = f"FILE:/tmp/{user}-it.ccache"
    cmd = f"kinit -kt /krb/keytabs/{user}.keytab {user} && exec themis-daemon client " + \
        " ".join(args)
    r = rm.exec_run(["bash", "-c", cmd], environment={"KRB5CCNAME": cc})
    return r.exit_code, r.output.decode(errors="replace")


def test_rm_rest_needs_a_ticket(secure_cluster: dict[str, Any]) -> None:
    krb = secure_cluster["kerberos"]
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


def test_webhdfs_enforces_permissions(secure_cluster: dict[str, Any]) -> None:
    krb = secure_cluster["kerberos"]
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


def test_bob_runs_a_mapreduce_job_in_his_queue(secure_cluster: dict[str, Any]) -> None:
    out = f"/user/bob/teragen-{id(secure_cluster)}"
    rc, log = _as_user(secure_cluster, "bob", EXAMPLES, "teragen",
                       "-Dmapreduce.job.queuename=bob", "-Dmapreduce.job.maps=2", "1000", out)
    assert rc == 0, log[-3000:]
    assert "completed successfully" in log, log[-3000:]
    admin = kinit(secure_cluster["kerberos"], "admin")
    code, body = negotiate(f"{NN}/webhdfs/v1{out}?op=GETFILESTATUS", admin)
    assert code == 200, body
    assert json.loads(body)["FileStatus"]["owner"] == "bob"
    code, body = negotiate(f"{RM}/ws/v1/cluster/apps?user=bob&states=FINISHED", admin)
    apps = (json.loads(body).get("apps") or {}).get("app", [])
    assert any(a["queue"] == "root.bob" and a["finalStatus"] == "SUCCEEDED" for a in apps), apps


def test_queue_acl_refuses_bob_in_alices_queue(secure_cluster: dict[str, Any]) -> None:
    rc, log = _as_user(secure_cluster, "bob", EXAMPLES, "pi",
                       "-Dmapreduce.job.queuename=alice", "2", "10")
    assert rc != 0, log[-3000:]
    assert "User bob does not have permission to submit" in log, log[-3000:]
    assert "to queue alice" in log, log[-3000:]


@pytest.mark.xfail(strict=True, reason=(
    "no MapReduce shuffle in the secure profile: the NodeManagers' ShuffleHandler opens map "
    "outputs through SecureIOUtils, which with Kerberos needs libhadoop (native code, not in "
    "the Maven jars) and files owned by the job's user (LinuxContainerExecutor)"))
def test_pi_with_a_shuffle(secure_cluster: dict[str, Any]) -> None:
    rc, log = _as_user(secure_cluster, "bob", EXAMPLES, "pi",
                       "-Dmapreduce.job.queuename=bob", "2", "10")
    assert rc == 0 and "Estimated value of Pi" in log, log[-1500:]
