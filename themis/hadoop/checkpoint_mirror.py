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
#: beside the job's HDFS directory (``<dir>.owner``): the container of the run that may
#: write it, claimed by each run's restore
OWNER_SUFFIX = ".owner"


class CheckpointFenced(Exception):
    """A newer run of the job claimed its HDFS directory: this run must not write it (its
    host was frozen or cut off while the job ran again elsewhere: docs/am.md, "Faults")."""


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
    """``owner``: the run's container id; with one, :meth:`restore` claims the directory
    for this run and :meth:`save` refuses (:class:`CheckpointFenced`) once another run
    claimed it: a job's runs follow one another, so the newest claim is the live run's,
    and a stale run (thawed, or cut off and then killed) cannot put its older state over
    the newer run's."""

    def __init__(self, fs: WebHdfs, local: Path, remote: str, owner: str = "") -> None:
        self.fs = fs
        self.local = local
        self.remote = remote.rstrip("/")
        self.owner = owner
        self._claimed = False
        self._restored: dict[str, tuple[int, int]] = {}

    @property
    def owner_path(self) -> str:
        return self.remote + OWNER_SUFFIX

    def _claim(self) -> None:
        self.fs.write(self.owner_path, self.owner.encode())
        self._claimed = True

    def check_owner(self) -> None:
        """Raise :class:`CheckpointFenced` when another run claimed the directory. A run
        whose claim failed (HDFS unwritable at its start) claims at its first save."""
        if not self.owner:
            return
        if not self._claimed:
            self._claim()
            return
        current = self.fs.read_or_none(self.owner_path)
        if current is not None and current.decode(errors="replace") != self.owner:
            raise CheckpointFenced(f"{self.remote} belongs to "
                                   f"{current.decode(errors='replace')[:80]} now, not to "
                                   f"{self.owner}")

    def restore(self) -> tuple[int, int]:
        """HDFS -> the local directory (after claiming it, with an owner); returns (files,
        bytes copied)."""
        from themis.hadoop.tblogs import download

        if self.owner:
            self._claim()
        self.local.mkdir(parents=True, exist_ok=True)
        _, copied, nbytes = download(self.fs, self.remote, self.local)
        self._restored = _local_files(self.local)
        return copied, nbytes

    def save(self) -> tuple[int, int]:
        """The local directory -> HDFS (changed files written, deleted ones deleted);
        returns (files written, files deleted). Raises WebHdfsError (what was written is
        then written again by the next save; the HDFS index still names the previous
        checkpoint, whose files are not touched: docs/am.md, "Faults").

        Safe while the job runs and writes checkpoints (the runner's copies every
        ``--checkpoint-every`` seconds): the index file is read *first* and its content
        of that moment written last, so it names only checkpoints whose files were
        complete before (TensorFlow writes a checkpoint's files, then the index). A file
        that vanishes during the copy (the job rotated it away) makes this save stop
        before the index and every deletion; the next one catches up. Returns (files
        written, -1) then. Raises :class:`CheckpointFenced` (nothing written) when a newer
        run of the job claimed the directory."""
        self.check_owner()
        index_path = self.local / INDEX_FILE
        index: bytes | None = None
        try:  # stat, then read: a newer index than its stat is written again next time
            st = index_path.stat()
            index = index_path.read_bytes()
            index_st = (st.st_size, st.st_mtime_ns)
        except (FileNotFoundError, IsADirectoryError):
            index = None
        now = _local_files(self.local)
        if index is None:  # none, or it appeared after it was read: copied next time
            now.pop(INDEX_FILE, None)
        else:
            now[INDEX_FILE] = index_st
        changed = sorted((rel for rel, st in now.items() if self._restored.get(rel) != st),
                         key=lambda rel: (rel == INDEX_FILE, rel))
        written = 0
        for rel in changed:
            if rel == INDEX_FILE and index is not None:
                data = index
            else:
                try:
                    data = (self.local / rel).read_bytes()
                except FileNotFoundError:
                    log.info("checkpoint file %s vanished while being saved (rotated by the "
                             "job): the next save catches up", rel)
                    return written, -1
            self.fs.write(posixpath.join(self.remote, rel), data)
            written += 1
        gone = [rel for rel in self._restored if rel not in now]
        for rel in gone:
            self.fs.delete(posixpath.join(self.remote, rel))
        self._restored = now
        if written or gone:
            log.info("checkpoint dir saved to %s: %d file(s) written, %d deleted",
                     self.remote, written, len(gone))
        return written, len(gone)
