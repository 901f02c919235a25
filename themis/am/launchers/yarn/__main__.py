"""The YARN application master's Python side: ``python -m themis.am.launchers.yarn``, started
by the JVM shell (org.themis.am.AppMaster) with its Py4J gateway's port and token.

It reads the app's spec from HDFS and runs :class:`~themis.am.launchers.yarn.am.AppMaster`
with the cluster's Themis arbiter, or :class:`~themis.am.launchers.yarn.stock.StockAppMaster`
when the cluster runs none (``THEMIS_ARBITER`` or ``yarn.resourcemanager.themis.agent-address``
= ``none``: YARN's own scheduler alone; docs/am.md).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Sequence

from themis.am.launchers.yarn.am import AppMaster
from themis.am.launchers.yarn.commands import default_arbiter
from themis.am.launchers.yarn.records import parse_container_id
from themis.am.launchers.yarn.shell import JvmShell
from themis.am.launchers.yarn.stock import StockAppMaster, no_arbiter
from themis.am.launchers.yarn.thaw import fence_after
from themis.am.spec import AppSpec
from themis.hadoop.security import agent_options
from themis.hadoop.webhdfs import WebHdfs


def main(argv: Sequence[str] | None = None) -> int:
    del argv
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    port = int(os.environ.get("THEMIS_GATEWAY_PORT", "0"))
    token = os.environ.get("THEMIS_GATEWAY_TOKEN", "")
    if port <= 0 or not token:
        print("themis.am.launchers.yarn: started by org.themis.am.AppMaster (needs "
              "THEMIS_GATEWAY_PORT and THEMIS_GATEWAY_TOKEN)", file=sys.stderr)
        return 2
    from py4j.java_gateway import GatewayParameters, JavaGateway

    gateway = JavaGateway(gateway_parameters=GatewayParameters(
        address="127.0.0.1", port=port, auth_token=token, auto_convert=True))
    shell = JvmShell(gateway.entry_point)
    env = os.environ
    app_id, attempt = parse_container_id(env["CONTAINER_ID"])
    webhdfs_url = env.get("THEMIS_WEBHDFS_URL", "http://127.0.0.1:9870")
    # as the app's user: its delegation token on a secure cluster, else its name
    hdfs = WebHdfs.in_container(webhdfs_url, env)
    app_dir = env.get("THEMIS_APP_DIR") or f"/user/{hdfs.user}/.themis/{app_id}"
    raw = hdfs.read(env.get("THEMIS_SPEC_PATH") or f"{app_dir}/spec.json")
    spec = AppSpec.from_json(raw.decode())
    arbiter = env.get("THEMIS_ARBITER", "") or default_arbiter(
        lambda k, d: str(gateway.entry_point.conf(k, d) or ""))
    try:  # the AMRMToken registers, TLS as the cluster says (docs/yarn.md, "Security")
        options = agent_options(env, gateway.entry_point)
    except ValueError as e:
        print(f"themis.am.launchers.yarn: {e}", file=sys.stderr)
        gateway.close()
        return 2
    # no arbiter (agent-address = none): YARN's scheduler alone (stock.py)
    cls = StockAppMaster if no_arbiter(arbiter) else AppMaster
    am = cls(spec, app_id, shell, arbiter=arbiter, hdfs=hdfs, app_dir=app_dir,
             webhdfs_url=webhdfs_url, attempt=attempt,
             python=env.get("THEMIS_JOB_PYTHON") or sys.executable)
    am.agent_options = options
    # the runners' thaw fence (thaw.py) from the cluster's liveness expiry
    am.fence_after_s = fence_after(lambda k, d: str(gateway.entry_point.conf(k, d) or ""))
    signal.signal(signal.SIGTERM, lambda s, f: am.kill())
    try:
        rc = am.run()
    finally:
        gateway.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())

