"""Checkpoint bookkeeping on top of a :class:`~themis.jobs.storage.CheckpointStore`.

Framework-agnostic: the caller supplies a function that writes the checkpoint files into
a local directory and one that restores from such a directory.

Layout: entry ``ckpt-<step, 12 digits>`` holds the framework's files plus
``MANIFEST.json`` (format tag, step, size and SHA-256 of every file). A checkpoint is
*complete* when its entry exists under its final name and every file matches the
manifest. Restoring walks the complete-looking entries from the newest step down; an
entry whose manifest is missing or does not match, or whose restore raises, is logged as
a warning and skipped - never fatal, never deleted. If the job later reaches the step of
a skipped entry, that entry is renamed ``corrupt-<name>-<random>`` (logged) to make room
for the new checkpoint. A store that cannot be read (HDFS unreachable, the NameNode
restarting, a DataNode gone) is not a corrupt checkpoint: the restore tries again for up
to ``wait_s`` seconds and then fails with :class:`StoreUnreadable`, rather than start from
an older checkpoint (or from step 0) and lose the steps since. Only an entry that is gone
from the listing when its read failed (removed meanwhile) is skipped. Only retention
(keep the newest N) deletes, and it logs every deletion; a deletion takes the entry's
name away in one step (the store renames it ``.deleting-*`` first), and a deletion
interrupted by a kill is finished by the next retention pass.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from themis.jobs.storage import DELETING_PREFIX, TMP_PREFIX, CheckpointStore, StorageError

LOG = logging.getLogger(__name__)
T = TypeVar("T")

MANIFEST = "MANIFEST.json"
#: how long a restore keeps trying a store it cannot read (the runners' --restore-wait)
RESTORE_WAIT_S = 300.0
FORMAT = "themis-ckpt-v1"
_NAME_RE = re.compile(r"^ckpt-(\d{12})$")


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or verified (names the checkpoint and why)."""


class StoreUnreadable(CheckpointError):
    """The store could not be listed or read for the whole of a restore's wait."""


def checkpoint_name(step: int) -> str:
    if step < 0:
        raise CheckpointError(f"checkpoint step must be >= 0, got {step}")
    return f"ckpt-{step:012d}"


def parse_step(name: str) -> int | None:
    m = _NAME_RE.match(name)
    return int(m.group(1)) if m else None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(directory: Path, step: int) -> None:
    files = {
        p.name: {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != MANIFEST
    }
    if not files:
        raise CheckpointError(f"checkpoint for step {step}: the writer produced no files")
    doc = {"format": FORMAT, "step": step, "files": files}
    (directory / MANIFEST).write_text(json.dumps(doc, indent=1, sort_keys=True))


def verify_manifest(directory: Path, expected_step: int) -> None:
    """Raise :class:`CheckpointError` unless ``directory`` matches its manifest."""
    mpath = directory / MANIFEST
    try:
        doc = json.loads(mpath.read_text())
    except FileNotFoundError as e:
        raise CheckpointError(f"{directory.name}: no {MANIFEST} (partial checkpoint?)") from e
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{directory.name}: unreadable {MANIFEST}: {e}") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CheckpointError(f"{directory.name}: {MANIFEST} is not a {FORMAT} manifest")
    if doc.get("step") != expected_step:
        raise CheckpointError(
            f"{directory.name}: manifest step {doc.get('step')!r} != name step {expected_step}"
        )
    files = doc.get("files")
    if not isinstance(files, dict) or not files:
        raise CheckpointError(f"{directory.name}: manifest lists no files")
    for fname, meta in files.items():
        p = directory / fname
        if not p.is_file():
            raise CheckpointError(f"{directory.name}: file {fname!r} is missing")
        if p.stat().st_size != meta.get("size"):
            raise CheckpointError(
                f"{directory.name}: file {fname!r} has {p.stat().st_size} bytes, "
                f"manifest says {meta.get('size')}"
            )
        if _sha256(p) != meta.get("sha256"):
            raise CheckpointError(f"{directory.name}: file {fname!r} fails its SHA-256 check")


@dataclass(frozen=True, slots=True)
class RestoreResult:
    step: int
    name: str
    skipped: tuple[str, ...]  # newer entries that were skipped as corrupt/partial


class CheckpointManager:
    """Save with retention and restore the newest complete checkpoint."""

    def __init__(self, store: CheckpointStore, keep: int = 3) -> None:
        if keep < 1:
            raise CheckpointError(f"keep must be >= 1, got {keep}")
        self.store = store
        self.keep = keep
        self._skipped: set[str] = set()

    def steps(self) -> list[int]:
        """Steps of the entries named like checkpoints, ascending (not verified)."""
        steps: list[int] = []
        for name in self.store.list_names():
            step = parse_step(name)
            if step is not None:
                steps.append(step)
        return sorted(steps)

    def save(self, step: int, write: Callable[[Path], None]) -> str:
        """Write a checkpoint for ``step`` with ``write(local_dir)``, publish it, prune."""
        name = checkpoint_name(step)
        with tempfile.TemporaryDirectory(prefix="themis-ckpt-") as tmp:
            local = Path(tmp) / name
            local.mkdir()
            write(local)
            write_manifest(local, step)
            try:
                if name in self._skipped:
                    aside = f"corrupt-{name}-{uuid.uuid4().hex[:8]}"
                    LOG.warning("moving unusable checkpoint %s aside as %s in %s",
                                name, aside, self.store.description)
                    self.store.rename(name, aside)
                    self._skipped.discard(name)
                self.store.put_dir(local, name)
            except StorageError as e:
                raise CheckpointError(f"saving {name}: {e}") from e
        self._prune()
        return name

    def _prune(self) -> None:
        steps = self.steps()
        for step in steps[: max(0, len(steps) - self.keep)]:
            name = checkpoint_name(step)
            LOG.info("deleting old checkpoint %s from %s (keeping the newest %d)",
                     name, self.store.description, self.keep)
            try:
                self.store.delete(name)
            except StorageError as e:
                LOG.warning("could not delete old checkpoint %s: %s", name, e)
        try:
            leftovers = [n for n in self.store.list_names() if n.startswith(DELETING_PREFIX)]
        except StorageError as e:
            LOG.warning("could not list %s: %s", self.store.description, e)
            leftovers = []
        for name in leftovers:
            LOG.info("finishing the interrupted deletion of %s in %s", name,
                     self.store.description)
            try:
                self.store.delete(name)
            except StorageError as e:
                LOG.warning("could not delete %s: %s", name, e)

    def restore_latest(self, restore: Callable[[Path, int], None],
                       wait_s: float = RESTORE_WAIT_S,
                       sleep: Callable[[float], None] = time.sleep,
                       clock: Callable[[], float] = time.monotonic) -> RestoreResult | None:
        """Restore the newest checkpoint that verifies and restores; None if there is none.

        ``restore(local_dir, step)`` loads the framework state; any exception it raises
        marks that checkpoint as unusable and the next older one is tried. A store that
        cannot be listed or read is tried again (pauses of 1 s doubling to 15 s) until
        ``wait_s`` seconds have passed, then :class:`StoreUnreadable` is raised: an older
        checkpoint is never restored because the newer one could not be *read*."""
        deadline = clock() + wait_s
        names = self._until(deadline, "list", self.store.list_names, sleep, clock)
        skipped: list[str] = []
        for name in names:
            if parse_step(name) is None:
                kind = ("incomplete upload" if name.startswith(TMP_PREFIX) else
                        "interrupted deletion" if name.startswith(DELETING_PREFIX) else "entry")
                LOG.warning("ignoring %s %r in %s (not deleted)",
                            kind, name, self.store.description)
        steps = sorted(s for n in names if (s := parse_step(n)) is not None)
        for step in reversed(steps):
            name = checkpoint_name(step)
            tmp = Path(tempfile.mkdtemp(prefix="themis-restore-"))
            try:
                local = tmp / name
                if not self._fetch(name, local, deadline, sleep, clock):
                    continue  # removed while it was read: not a checkpoint any more
                verify_manifest(local, step)
                restore(local, step)
            except StoreUnreadable:
                raise
            except Exception as e:
                LOG.warning("skipping checkpoint %s in %s: %s (left in place)",
                            name, self.store.description, e)
                skipped.append(name)
                self._skipped.add(name)
                continue
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            return RestoreResult(step=step, name=name, skipped=tuple(skipped))
        return None

    def _fetch(self, name: str, local: Path, deadline: float,
               sleep: Callable[[float], None], clock: Callable[[], float]) -> bool:
        """Copy entry ``name`` to ``local``; False when the entry left the store's listing
        after a failed read. Raises :class:`StoreUnreadable` when the store could not be
        read until ``deadline``."""
        def attempt() -> bool:
            try:
                self.store.get_dir(name, local)
                return True
            except StorageError as e:
                shutil.rmtree(local, ignore_errors=True)
                if name not in self.store.list_names():  # (a failed listing is retried too)
                    LOG.warning("checkpoint %s left %s while it was read (%s): not restored",
                                name, self.store.description, e)
                    return False
                raise

        return self._until(deadline, f"read {name} from", attempt, sleep, clock)

    def _until(self, deadline: float, what: str, fn: Callable[[], T],
               sleep: Callable[[float], None], clock: Callable[[], float]) -> T:
        """``fn()``, tried again on :class:`StorageError` (pauses of 1 s doubling to 15 s)
        until ``deadline``, then :class:`StoreUnreadable`."""
        pause = 1.0
        while True:
            try:
                return fn()
            except StorageError as e:
                if clock() + pause > deadline:
                    raise StoreUnreadable(
                        f"could not {what} {self.store.description} for the restore's wait "
                        f"({e}); the job does not start without them: an older checkpoint is "
                        "not restored instead, which would lose the steps since, and every "
                        "checkpoint is left in place"
                    ) from e
                LOG.warning("cannot %s %s (tried again in %.0f s): %s",
                            what, self.store.description, pause, e)
                sleep(pause)
                pause = min(2 * pause, 15.0)
