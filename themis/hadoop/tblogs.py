"""The jobs' TensorBoard logs, kept in HDFS: ``<app dir>/tensorboard/<job id>/``.

A job writes its TensorFlow event files into its container's working directory (the
``{logdir}`` of the job command), which YARN deletes when the container ends. The runner in
every job container (:mod:`themis.am.launchers.yarn.runner`) therefore copies them with
:class:`EventLogUpload`: every ``--tensorboard-every`` seconds it appends the bytes written
since the last copy to a file of the same name (and relative path: Keras writes
``train/`` and ``validation/``) under the job's HDFS directory, and once more after the job
exited. Each run of a job writes a new event file, so a job moved between GPUs has one file
per run segment, and TensorBoard shows them as one run. A failed append is repaired by
rewriting the whole file from the container's copy on the next attempt.

The jobs do not write to HDFS themselves: TensorFlow's pip package has no ``hdfs://`` file
system (TensorFlow 2.21: "File system scheme 'hdfs' not implemented"; tensorflow-io's needs
``libhdfs.so`` and a Hadoop client in the container, which the images do not have).

``themis logs APP --tensorboard`` downloads the app's logs (only the files that changed
since the last call), prints the local directory and names the ``tensorboard --logdir``
command that shows every trial; it can be rerun while the app runs.
"""

from __future__ import annotations

import logging
import os
import posixpath
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when used: `themis --help` need not load the HDFS client
    from themis.hadoop.webhdfs import WebHdfs

LOG = logging.getLogger(__name__)

EVENT_FILE_GLOB = "events.out.tfevents.*"
TENSORBOARD_SUBDIR = "tensorboard"


def tensorboard_dir(app_dir: str, job_id: str | None = None) -> str:
    """The HDFS directory of an app's TensorBoard logs, or of one job's."""
    base = f"{app_dir.rstrip('/')}/{TENSORBOARD_SUBDIR}"
    return f"{base}/{job_id}" if job_id else base


class EventLogUpload:
    """Copies the event files under ``logdir`` to HDFS directory ``dest`` as they grow."""

    def __init__(self, fs: WebHdfs, logdir: Path, dest: str) -> None:
        self.fs = fs
        self.logdir = Path(logdir)
        self.dest = dest.rstrip("/")
        self.uploaded = 0  # bytes copied in total
        self._sent: dict[str, int] = {}  # relative path -> bytes known to be in HDFS
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_error = ""

    def sync(self) -> int:
        """Copy what was written since the last call; returns the bytes copied. A file
        whose copy failed is rewritten whole on the next call."""
        copied = 0
        with self._lock:
            for path in sorted(self.logdir.rglob(EVENT_FILE_GLOB)):
                rel = path.relative_to(self.logdir).as_posix()
                copied += self._sync_file(path, rel)
        self.uploaded += copied
        return copied

    def _sync_file(self, path: Path, rel: str) -> int:
        from themis.hadoop.webhdfs import WebHdfsError

        sent = self._sent.get(rel, 0)  # -1: the HDFS copy is in doubt, rewrite it
        remote = posixpath.join(self.dest, rel)
        try:
            with open(path, "rb") as f:
                f.seek(max(sent, 0))
                data = f.read()
        except OSError as e:
            LOG.debug("%s: not readable now: %s", path, e)
            return 0
        if not data:
            return 0
        try:
            if sent > 0:
                self.fs.append(remote, data)
            else:
                self.fs.write(remote, data, overwrite=True)
        except WebHdfsError as e:
            self._sent[rel] = -1
            if str(e) != self._last_error:
                self._last_error = str(e)
                LOG.warning("TensorBoard log copy to HDFS failed (retried): %s", e)
            return 0
        self._sent[rel] = max(sent, 0) + len(data)
        return len(data)

    def start(self, every_s: float) -> None:
        """Sync every ``every_s`` seconds in a background thread until :meth:`close`."""
        def loop() -> None:
            while not self._stop.wait(every_s):
                try:
                    self.sync()
                except Exception as e:  # never let the copy end the job's runner
                    LOG.warning("TensorBoard log copy: %s", e)

        self._thread = threading.Thread(target=loop, name="tensorboard-upload", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 30.0) -> None:
        """Stop the background thread and make a last copy (the job has exited)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        try:
            self.sync()
        except Exception as e:
            LOG.warning("TensorBoard log copy: %s", e)


def download(fs: WebHdfs, src: str, dest: Path) -> tuple[int, int, int]:
    """Copy every file under HDFS directory ``src`` into ``dest``, skipping files whose
    local copy has the HDFS length already. Returns (files, files copied, bytes copied)."""
    files = fs.files_under(src)
    copied = nbytes = 0
    for rel, st in files:
        local = dest / rel
        if local.is_file() and local.stat().st_size == int(st.get("length", -1)):
            continue
        data = fs.read(posixpath.join(src, rel))
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(local.name + ".part")
        tmp.write_bytes(data)
        os.replace(tmp, local)
        copied += 1
        nbytes += len(data)
    return len(files), copied, nbytes
