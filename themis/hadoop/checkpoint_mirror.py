"""A job's local checkpoint directory kept in HDFS across container runs (docs/jobs.md).

A job on YARN that checkpoints with plain TensorFlow or Keras cannot write ``hdfs://``
(TensorFlow's pip package has no HDFS file system), and its container's working directory
is gone when the container ends. The runner therefore gives the job a local directory
(``{checkpoint_dir}``, ``$THEMIS_CHECKPOINT_DIR``), fills it from the job's HDFS directory
before the job starts (:meth:`CheckpointMirror.restore`) and mirrors it back after the job
exited (:meth:`CheckpointMirror.save`): files that changed are written, files the job
deleted (checkpoint rotation) are deleted. A save writes one state of the directory, with
TensorFlow's ``checkpoint`` index (and Keras' backup metadata) last, so an interrupted save
leaves the index naming checkpoints whose files are complete.

Each file is written under a name of its own beside the directory (``<dir>.part/``) and then
renamed over the stored one (:meth:`~themis.hadoop.webhdfs.WebHdfs.rename_over`): the
stored file stays whole until its new copy is complete, and a write cut by an HDFS fault (a
DataNode lost, the NameNode restarting) leaves only its part file, whose lease, held by the
writer that is gone, blocks no later copy. Overwriting the stored file in place would fail
until the NameNode recovered that lease (60 s or more), and the copies of a running job
would lag that long (docs/am.md, "Faults"). Part files left by cut writes are deleted by
the next run's restore.
"""

from __future__ import annotations

import logging
import posixpath
import re
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from themis.hadoop.webhdfs import WebHdfs

log = logging.getLogger("themis.am.launchers.yarn.runner")

#: checkpoint names whose step the launchers read: the bundled job's ``ckpt-<step>``
#: directories and TensorFlow's ``ckpt-<n>.index`` (``CheckpointManager(...,
#: checkpoint_number=step)`` or Keras' ``ModelCheckpoint("ckpt-{epoch}")``)
CKPT_NAME = re.compile(r"ckpt-(\d{1,18})(?:\.index|\.weights\.h5|\.keras)?")
#: TensorFlow's index of the newest checkpoints
INDEX_FILE = "checkpoint"
#: written after every other file of a save: files that name the state the others hold
#: (TensorFlow's index; the epoch and batch of Keras' ``BackupAndRestore`` weights)
LAST_FILES = frozenset({INDEX_FILE, "training_metadata.json"})
#: beside the job's HDFS directory (``<dir>.owner``): the container of the run that may
#: write it, claimed by each run's restore
OWNER_SUFFIX = ".owner"
#: beside the job's HDFS directory (``<dir>.part``): files being written, each renamed into
#: place once complete
PART_SUFFIX = ".part"


class CheckpointFenced(Exception):
    """A newer run of the job claimed its HDFS directory: this run must not write it (its
    host was frozen or cut off while the job ran again elsewhere: docs/am.md, "Faults")."""


def checkpoint_steps(directory: Path) -> list[int]:
    """Steps of the checkpoints in ``directory`` (by name, :data:`CKPT_NAME`), ascending."""
    if not directory.is_dir():
        return []
    return sorted({int(m.group(1)) for p in directory.iterdir()
                   if (m := CKPT_NAME.fullmatch(p.name))})


def _newest_ns(listing: dict[str, tuple[int, int]]) -> int:
    """The newest mtime (ns) of a :func:`_local_files` listing; 0 when it is empty."""
    return max((mtime for _, mtime in listing.values()), default=0)


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

    @property
    def part_dir(self) -> str:
        return self.remote + PART_SUFFIX

    def _put(self, path: str, data: bytes) -> None:
        """``data`` as the HDFS file ``path``: written as a new part file, then renamed
        over ``path`` (module docstring); ``path``'s directory must exist."""
        part = posixpath.join(self.part_dir,
                              f"{uuid.uuid4().hex[:16]}-{posixpath.basename(path)}")
        self.fs.write(part, data, overwrite=False)
        self.fs.rename_over(part, path)

    def _claim(self) -> None:
        self.fs.mkdirs(posixpath.dirname(self.owner_path))
        self._put(self.owner_path, self.owner.encode())
        self._claimed = True

    def _drop_parts(self) -> None:
        """Part files of writes that were cut (runs before this one): deleted, whatever
        leases they hold; a failure is only logged (they are tried again next run)."""
        from themis.hadoop.webhdfs import WebHdfsError

        try:
            self.fs.delete(self.part_dir, recursive=True)
        except WebHdfsError as e:
            log.warning("part files of cut writes in %s not deleted: %s", self.part_dir, e)

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
            self._drop_parts()  # (a run that only reads, a task's, leaves the chief's)
        self.local.mkdir(parents=True, exist_ok=True)
        _, copied, nbytes = download(self.fs, self.remote, self.local)
        self._restored = _local_files(self.local)
        return copied, nbytes

    def save(self, settle_s: float = 0.0) -> tuple[int, int]:
        """The local directory -> HDFS (changed files written, deleted ones deleted);
        returns (files written, files deleted). Raises WebHdfsError (what was written is
        then written again by the next save: docs/am.md, "Faults"), and
        :class:`CheckpointFenced` (nothing written) when a newer run of the job claimed
        the directory.

        What is written is one state of the directory, also while the job runs and
        writes checkpoints (the runner's copies every ``--checkpoint-every`` seconds):
        every changed file is read into memory, and the listing (size, mtime) taken
        before the reads must be the same after them. If the job wrote meanwhile, or
        within ``settle_s`` seconds before (a writer between two files: Keras'
        BackupAndRestore rewrites its weights, then the metadata naming their epoch, in
        place), nothing is written and (0, -1) is returned; the next save catches up.
        Files in :data:`LAST_FILES` (the index of a checkpoint, the metadata of a
        backup) are written after every other changed file, so a save cut short leaves
        HDFS's index naming complete checkpoints."""
        before = _local_files(self.local)
        if settle_s > 0 and time.time_ns() - _newest_ns(before) < settle_s * 1e9:
            return 0, -1  # (tried again soon: the owner is read only for a save that may write)
        self.check_owner()
        changed = sorted((rel for rel, st in before.items() if self._restored.get(rel) != st),
                         key=lambda rel: (rel in LAST_FILES, rel))
        data: dict[str, bytes] = {}
        try:
            for rel in changed:
                data[rel] = self._read(rel)
        except FileNotFoundError:
            pass  # rotated away by the job: the listing below differs
        if _local_files(self.local) != before:
            log.info("checkpoint dir %s changed while being read: copied next time",
                     self.local)
            return 0, -1
        for parent in sorted({posixpath.dirname(posixpath.join(self.remote, rel))
                              for rel in changed}):
            self.fs.mkdirs(parent)  # (a rename's target directory must exist)
        for rel in changed:
            self._put(posixpath.join(self.remote, rel), data[rel])
        gone = [rel for rel in self._restored if rel not in before]
        for rel in gone:
            self.fs.delete(posixpath.join(self.remote, rel))
        self._restored = before
        if changed or gone:
            log.info("checkpoint dir saved to %s: %d file(s) written, %d deleted",
                     self.remote, len(changed), len(gone))
        return len(changed), len(gone)

    def last_change(self) -> float:
        """When a file of the local directory last changed (seconds since the epoch; 0
        for an empty or missing directory)."""
        return _newest_ns(_local_files(self.local)) / 1e9

    def _read(self, rel: str) -> bytes:
        return (self.local / rel).read_bytes()
