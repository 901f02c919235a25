"""The app's TensorBoard container (spec ``tensorboard``, ``themis job run --tensorboard``):
``python -m themis.am.launchers.yarn.tbserve``, launched by the AM
(:class:`themis.am.launchers.yarn.tbcontainer.TensorBoardContainer`).

It serves every job's event files, which the job runners copy to the app's HDFS directory
``<app dir>/tensorboard/<job id>/`` while the jobs run (:mod:`.tblogs`): it copies that
directory into the container (only files that are new or grew, every ``--every`` seconds,
with :func:`themis.hadoop.tblogs.download`), runs TensorBoard's own server
(``tensorboard.program``) on the copy, and publishes its URL in HDFS (``--publish``, JSON:
url, container, started), where the AM reads it for its status page and ``themis status``.
TensorBoard cannot read HDFS itself without TensorFlow's HDFS file system, which the
NodeManager hosts need not have; the copy costs one directory listing per interval.

The server binds and advertises the host of the AM's rule (:func:`.am.http_hosts`: the
NodeManager's host name, ``NM_HOST``, unless ``THEMIS_AM_BIND_HOST`` / ``THEMIS_AM_HOST``
say otherwise) on a free port (``--port``, default 0). TensorBoard has no authentication:
anyone who reaches the NodeManager host can read the app's curves, as with Submarine's.
SIGTERM (the AM releasing the container) ends it with status 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

LOG = logging.getLogger("themis.am.launchers.yarn.tbserve")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m themis.am.launchers.yarn.tbserve",
        description="Serve an app's TensorBoard event files, copied from HDFS (started by "
                    "the Themis AM in the app's TensorBoard container).")
    p.add_argument("--src", required=True,
                   help="HDFS directory of the app's event files (<app dir>/tensorboard)")
    p.add_argument("--publish", required=True,
                   help="HDFS file where the server's URL is written (JSON)")
    p.add_argument("--logdir", type=Path, default=Path("tensorboard-logs"),
                   help="local copy of --src, TensorBoard's --logdir (default %(default)s)")
    p.add_argument("--every", type=float, default=10.0,
                   help="seconds between copies from HDFS, also TensorBoard's reload "
                        "interval (default %(default)s)")
    p.add_argument("--port", type=int, default=0,
                   help="TCP port of the server (default 0: a free one)")
    p.add_argument("--webhdfs", default=None,
                   help="NameNode HTTP address (default $THEMIS_WEBHDFS_URL or "
                        "http://127.0.0.1:9870)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    if not 0 <= args.port <= 65535 or not 1.0 <= args.every <= 3600:
        print("tbserve: --port must be in [0, 65535] and --every in [1, 3600]",
              file=sys.stderr)
        return 2
    from tensorboard import program

    from themis.am.launchers.yarn.http import http_hosts, url_host
    from themis.hadoop.tblogs import download
    from themis.hadoop.webhdfs import WebHdfs, WebHdfsError

    env = os.environ
    fs = WebHdfs.in_container(
        args.webhdfs or env.get("THEMIS_WEBHDFS_URL", "http://127.0.0.1:9870"), env)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda s, f: stop.set())
    args.logdir.mkdir(parents=True, exist_ok=True)

    def sync() -> None:
        try:
            files, copied, nbytes = download(fs, args.src, args.logdir)
            if copied:
                LOG.info("copied %d of %d event files (%d bytes)", copied, files, nbytes)
        except (WebHdfsError, OSError) as e:  # no job has written yet, or HDFS away
            LOG.info("event files not copied: %s", e)

    sync()
    bind, advertised = http_hosts(env)
    tb = program.TensorBoard()
    tb.configure(argv=[None, "--logdir", str(args.logdir), "--host", bind, "--port",
                       str(args.port), "--reload_interval", str(args.every),
                       "--load_fast", "false"])
    served = tb.launch()  # the server runs in its own threads
    port = int(served.rstrip("/").rsplit(":", 1)[1])
    url = f"http://{url_host(advertised)}:{port}/"
    doc = {"url": url, "container": env.get("CONTAINER_ID", ""), "started": time.time()}
    try:
        fs.write_atomic(args.publish, json.dumps(doc).encode())
    except WebHdfsError as e:
        LOG.error("cannot publish the URL: %s", e)
        return 1
    LOG.info("TensorBoard at %s serving %s (copied from %s every %.0fs)", url, args.logdir,
             args.src, args.every)
    while not stop.wait(args.every):
        sync()
    LOG.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
