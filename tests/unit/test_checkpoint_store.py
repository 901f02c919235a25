"""Checkpoint retention on a local store when the writer dies in the middle of deleting an
old checkpoint (a SIGKILL during retention, issue 22's job-kill trials): no entry under a
checkpoint's name is ever left half deleted, and the next save finishes the deletion."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from themis.jobs import storage
from themis.jobs.checkpoints import MANIFEST, CheckpointManager, parse_step, verify_manifest
from themis.jobs.storage import DELETING_PREFIX, LocalDirStore


class _Killed(BaseException):
    """Stands for the SIGKILL: nothing after it runs (not an Exception: no handler)."""


def _writer(step: int) -> Callable[[Path], None]:
    def write(d: Path) -> None:
        (d / "weights.bin").write_bytes(bytes([step % 256]) * 64)
        (d / "state.json").write_text(f'{{"step": {step}}}')
    return write


def _entries(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def test_a_writer_killed_while_deleting_an_old_checkpoint_leaves_no_partial_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "store"
    mgr = CheckpointManager(LocalDirStore(root), keep=2)
    mgr.save(10, _writer(10))
    mgr.save(20, _writer(20))

    real_rmtree = shutil.rmtree

    def dies_half_way(path: Any, *args: Any, **kwargs: Any) -> None:
        p = Path(path)
        if p.parent != root:  # temporary directories: the real thing
            real_rmtree(path, *args, **kwargs)
            return
        (p / MANIFEST).unlink()  # the first file is gone, then the process dies
        raise _Killed

    monkeypatch.setattr(storage.shutil, "rmtree", dies_half_way)
    with pytest.raises(_Killed):
        mgr.save(30, _writer(30))  # published ckpt-30, killed while pruning ckpt-10
    monkeypatch.setattr(storage.shutil, "rmtree", real_rmtree)

    names = _entries(root)
    for name in names:
        step = parse_step(name)
        if step is not None:
            verify_manifest(root / name, step)  # raises for a half-deleted checkpoint
    assert [n for n in names if parse_step(n) is not None] == [
        "ckpt-000000000020", "ckpt-000000000030"]
    assert len([n for n in names if n.startswith(DELETING_PREFIX)]) == 1

    # a restarted writer restores the newest checkpoint and its next save finishes the
    # interrupted deletion
    fresh = CheckpointManager(LocalDirStore(root), keep=2)
    restored = fresh.restore_latest(lambda d, step: None)
    assert restored is not None and restored.step == 30 and restored.skipped == ()
    fresh.save(40, _writer(40))
    assert _entries(root) == ["ckpt-000000000030", "ckpt-000000000040"]


def test_delete_of_an_entry_removes_it(tmp_path: Path) -> None:
    store = LocalDirStore(tmp_path)
    src = tmp_path.parent / "src"
    src.mkdir()
    (src / "f").write_text("x")
    store.put_dir(src, "ckpt-000000000001")
    store.delete("ckpt-000000000001")
    assert _entries(tmp_path) == []
    with pytest.raises(storage.StorageError):
        store.delete("ckpt-000000000001")
