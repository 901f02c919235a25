"""A job's local checkpoint directory kept in HDFS across container runs (docs/jobs.md).

A job on YARN that checkpoints with plain TensorFlow or Keras cannot write ``hdfs://``
(TensorFlow's pip package has no HDFS file system), and its container's working directory
is gone when the container ends. The runner therefore gives the job a local directory
(``{checkpoint_dir}``, ``$THEMIS_CHECKPOINT_DIR``), fills it from the job's HDFS directory
before the job starts (:meth:`CheckpointMirror.restore`) and mirrors it back after the job
exited (:meth:`CheckpointMirror.save`): files that changed are written, files the job
deleted (checkpoint rotation) are deleted. TensorFlow's ``checkpoint`` index file is written
last, so an interrupted save leaves the index naming checkpoints whose files are complete.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from themis.hadoop.webhdfs import WebHdfs

log = logging.getLogger("themis.am.launchers.yarn.runner")

#: checkpoint names whose step the launchers read: the bundled job's ``ckpt-<step>``
#: directories and TensorFlow's ``ckpt-<n>.index`` (``CheckpointManager(...,
#: checkpoint_number=step)`` or Keras' ``ModelCheckpoint("ckpt-{epoch}")``)
CKPT_NAME = re.compile(r"ckpt-(\d{1,18})(?:\.index|\.weights\.h5|\.keras)?")
#: written last (TensorFlow's index of the newest checkpoints)
INDEX_FILE = "checkpoint"


def checkpoint_steps(directory: Path) -> list[int]:
    """Steps of the checkpoints in ``directory`` (by name, :data:`CKPT_NAME`), ascending."""
    if not directory.is_dir():
        return []
    return sorted({int(m.group(1)) for p in directory.iterdir()
                   if (m := CKPT_NAME.fullmatch(p.name))})


def _local_files(root: Path) -> dict[str, tuple[int, int]]:
    """Relative path -> (size, mtime ns) of every file below ``root``."""
    out: dict[str, tuple[int, int]] = {}
    if root.is_dir():
        for p in root.rglob("*"):
            if p.is_file():
                st = p.stat()
                out[p.relative_to(root).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out


class CheckpointMirror:
    def __init__(self, fs: WebHdfs, local: Path, remote: str) -> None:
        self.fs = fs
        self.local = local
        self.remote = remote.rstrip("/")
        self._restored: dict[str, tuple[int, int]] = {}

    def restore(self) -> tuple[int, int]:
        """HDFS -> the local directory; returns (files, bytes copied)."""
        from themis.hadoop.tblogs import download

        self.local.mkdir(parents=True, exist_ok=True)
        _, copied, nbytes = download(self.fs, self.remote, self.local)
        self._restored = _local_files(self.local)
        return copied, nbytes

    def save(self) -> tuple[int, int]:
        """The local directory -> HDFS (changed files written, deleted ones deleted);
        returns (files written, files deleted). Raises WebHdfsError."""
        now = _local_files(self.local)
        changed = sorted((rel for rel, st in now.items() if self._restored.get(rel) != st),
                         key=lambda rel: (rel == INDEX_FILE, rel))
        for rel in changed:
            self.fs.write(posixpath.join(self.remote, rel), (self.local / rel).read_bytes())
        gone = [rel for rel in self._restored if rel not in now]
        for rel in gone:
            self.fs.delete(posixpath.join(self.remote, rel))
        self._restored = now
        if changed or gone:
            log.info("checkpoint dir saved to %s: %d file(s) written, %d deleted",
                     self.remote, len(changed), len(gone))
        return len(changed), len(gone)
