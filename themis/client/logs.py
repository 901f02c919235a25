"""``themis logs APP --tensorboard``: download an app's TensorBoard event files from HDFS
(where the job runners keep them, :mod:`themis.hadoop.tblogs`)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from themis.hadoop.tblogs import download, tensorboard_dir

_APP_ID = re.compile(r"application_\d+_\d+")

def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "logs", help="download an app's TensorBoard logs from HDFS",
        formatter_class=argparse.RawDescriptionHelpFormatter, description=(
            "Download the TensorBoard event files of every job of a YARN app (kept in HDFS\n"
            "under /user/<user>/.themis/<app>/tensorboard/<job>/) into a local directory and\n"
            "print that directory on stdout; view them with `tensorboard --logdir <dir>`.\n"
            "Rerun it while the app runs: only the files that changed are downloaded again.\n"
            "The containers' stdout and stderr are YARN's: `yarn logs -applicationId <app>`."))
    p.add_argument("app_id", metavar="APP", help="the app's YARN id (application_<ts>_<n>)")
    p.add_argument("--tensorboard", action="store_true", required=True,
                   help="the TensorBoard event files (required: the only kind of log this "
                        "command downloads)")
    p.add_argument("--dest", type=Path, default=None,
                   help="local directory (default ./themis-tensorboard/<APP>)")
    p.add_argument("--webhdfs", default=None,
                   help="NameNode HTTP address (default $THEMIS_WEBHDFS_URL or "
                        "http://127.0.0.1:9870)")
    p.add_argument("--user", default=None,
                   help="HDFS user that submitted the app (default $HADOOP_USER_NAME, else "
                        "your login name; on a Kerberos cluster the ticket's user)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from themis.client.cluster import ClientError, Cluster
    from themis.hadoop.webhdfs import WebHdfsError

    if not _APP_ID.fullmatch(args.app_id):
        print(f"themis logs: {args.app_id!r} is not a YARN application id "
              "(application_<cluster timestamp>_<number>)", file=sys.stderr)
        return 2
    cluster = Cluster.from_env(None, args.webhdfs, args.user)
    try:
        if not args.user:
            cluster.whoami()  # with Kerberos: the ticket's user
    except ClientError as e:
        print(f"themis logs: {e}", file=sys.stderr)
        return 1
    src = tensorboard_dir(cluster.app_dir(args.app_id))
    dest: Path = args.dest or Path("themis-tensorboard") / args.app_id
    try:
        files, copied, nbytes = download(cluster.hdfs(), src, dest)
    except (WebHdfsError, OSError) as e:
        print(f"themis logs: {e}", file=sys.stderr)
        return 1
    if files == 0:
        print(f"themis logs: no TensorBoard logs in HDFS at {cluster.webhdfs_url}{src} "
              "(no job of the app has written event files yet, or another --user)",
              file=sys.stderr)
        return 1
    print(f"themis logs: {files} event files ({copied} new or grown, {nbytes} bytes "
          f"downloaded); view with: tensorboard --logdir {dest}", file=sys.stderr)
    print(dest)
    return 0
