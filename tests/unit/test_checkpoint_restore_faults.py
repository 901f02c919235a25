"""A restore that meets a store it cannot read (HDFS unreachable, the NameNode restarting,
a DataNode gone: issue 35) waits for it and never falls back to an older checkpoint, while
a checkpoint that *is* read and fails its manifest is still skipped, and one removed while
it was read is passed over (docs/jobs.md, "resume")."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from themis.jobs.checkpoints import (
    MANIFEST,
    CheckpointManager,
    StoreUnreadable,
    checkpoint_name,
)
from themis.jobs.storage import CheckpointStore, LocalDirStore, StorageError


class FlakyStore(CheckpointStore):
    """A local store whose reads and listings fail while ``down`` says so (unit-test fake
    of a WebHDFS store during a fault)."""

    def __init__(self, inner: LocalDirStore) -> None:
        self.inner = inner
        self.failed_reads = 0
        self.list_fails = 0      # the next N listings fail
        self.read_fails = 0      # the next N reads fail
        self.on_read_fail: Callable[[str], None] | None = None

    @property
    def description(self) -> str:
        return "flaky " + self.inner.description

    def list_names(self) -> list[str]:
        if self.list_fails > 0:
            self.list_fails -= 1
            raise StorageError("cannot list: connection refused")
        return self.inner.list_names()

    def get_dir(self, name: str, local_dir: Path) -> None:
        if self.read_fails > 0:
            self.read_fails -= 1
            self.failed_reads += 1
            local_dir.mkdir(parents=True)  # a read cut half way leaves a partial copy
            (local_dir / "weights.bin").write_bytes(b"half")
            if self.on_read_fail:
                self.on_read_fail(name)
            raise StorageError(f"cannot read {name!r}: read timed out")
        self.inner.get_dir(name, local_dir)

    def put_dir(self, local_dir: Path, name: str) -> None:
        self.inner.put_dir(local_dir, name)

    def delete(self, name: str) -> None:
        self.inner.delete(name)

    def rename(self, src: str, dst: str) -> None:
        self.inner.rename(src, dst)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def _write(step: int) -> Callable[[Path], None]:
    def write(d: Path) -> None:
        (d / "weights.bin").write_bytes(bytes([step % 256]) * 64)
    return write


@pytest.fixture
def store(tmp_path: Path) -> FlakyStore:
    s = FlakyStore(LocalDirStore(tmp_path / "ckpts"))
    mgr = CheckpointManager(s, keep=3)
    for step in (10, 20, 30):
        mgr.save(step, _write(step))
    return s


def _restore(store: FlakyStore, clock: FakeClock, wait_s: float = 60.0) -> tuple[
        int | None, list[int]]:
    seen: list[int] = []

    def restore(d: Path, step: int) -> None:
        assert (d / "weights.bin").read_bytes() == bytes([step % 256]) * 64
        seen.append(step)

    res = CheckpointManager(store).restore_latest(restore, wait_s=wait_s,
                                                  sleep=clock.sleep, clock=clock)
    return (res.step if res else None), seen


def test_a_read_that_fails_for_a_while_restores_the_newest(store: FlakyStore) -> None:
    clock = FakeClock()
    store.read_fails = 3
    step, seen = _restore(store, clock)
    assert step == 30 and seen == [30]
    assert clock.sleeps == [1.0, 2.0, 4.0]  # backing off, then the read went through


def test_a_store_unreadable_for_the_whole_wait_fails_and_restores_nothing_older(
        store: FlakyStore, tmp_path: Path) -> None:
    clock = FakeClock()
    store.read_fails = 10**6
    with pytest.raises(StoreUnreadable, match=r"ckpt-000000000030.*older checkpoint is not"):
        _restore(store, clock, wait_s=60.0)
    assert clock.now <= 60.0 and sum(clock.sleeps) >= 30.0  # it did wait
    # every checkpoint is still there, none renamed aside
    assert store.inner.list_names() == [checkpoint_name(s) for s in (10, 20, 30)]


def test_a_listing_that_fails_for_a_while_is_retried(store: FlakyStore) -> None:
    clock = FakeClock()
    store.list_fails = 2
    assert _restore(store, clock) == (30, [30])
    store.list_fails = 10**6
    with pytest.raises(StoreUnreadable, match="does not start without them"):
        _restore(store, FakeClock(), wait_s=10.0)


def test_an_entry_removed_while_it_was_read_is_passed_over(store: FlakyStore) -> None:
    clock = FakeClock()
    store.read_fails = 1
    store.on_read_fail = lambda name: store.inner.delete(name)  # retention elsewhere
    assert _restore(store, clock) == (20, [20])
    assert clock.sleeps == []


def test_a_corrupt_checkpoint_that_was_read_is_still_skipped(store: FlakyStore) -> None:
    newest = store.inner.root / checkpoint_name(30)
    (newest / "weights.bin").write_bytes(b"bit rot")
    clock = FakeClock()
    assert _restore(store, clock) == (20, [20])
    assert (newest / MANIFEST).exists()  # left in place, not deleted
