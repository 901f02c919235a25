"""The arbiter's persisted lease log: a restarted arbiter honours the leases of the one
before it until they expire.

An append-only file of JSON lines, each made durable (``fsync``) before the arbiter acts
on it. The first line is the header ``{"themis_lease_log": 1}``; then one record a line::

    {"op": "grant", "app": "a1", "gpus": ["m0-g0"], "start": 1.7e9, "expiry": 1.7e9, "via": "x"}
    {"op": "release", "gpus": ["m0-g0"]}

Rules (docs/mechanism.md, "Arbiter restarts"):

* **Write-ahead.** A round's grants are appended and fsync'd before any app is told of them;
  if the write fails the round's grants are withdrawn (the GPUs stay free). Releases
  (``ReleaseGpus``, ``Unregister``) are appended after the fact: a lost release only makes
  a restarted arbiter honour a lease longer, never shorter. Expiries are not written (a
  record whose ``expiry`` has passed is dead).
* **Replay.** At start the log is folded in order; for each GPU the latest record wins (the
  arbiter only grants a GPU that is free, so a later grant supersedes an earlier lease,
  and a release ends it). Leases whose expiry is in the future are restored before the
  service accepts a call: their GPUs are not offered until they expire, are released, or
  their app unregisters; the app that registers under the same id finds them in its Hello.
  A lease on a GPU the cluster no longer has is dropped with a warning.
* **Damage.** A last line without its newline is a write the crash cut short (never
  acknowledged, since fsync had not returned): it is ignored. Any other unreadable line
  stops the arbiter with an error naming the file and line; it does not guess which GPUs
  are free.
* **Size.** The log is rewritten with only the live leases (temporary file, fsync, rename)
  at start and whenever it has grown past ``compact_after`` records.

Expiries are wall-clock (Unix) seconds: a clock set back honours leases longer.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from themis.mechanism.round import LeaseGrant

log = logging.getLogger(__name__)

HEADER = {"themis_lease_log": 1}
MAX_LINE = 1 << 20  # characters of one record: a grant of 4,096 long GPU ids fits
MAX_FILE = 256 << 20  # bytes of a log at start (compaction keeps it far smaller)


class LeaseLogError(RuntimeError):
    """The lease log cannot be read or written (names the file and the line)."""


@dataclass(frozen=True, slots=True)
class LoggedLease:
    app_id: str
    gpu_id: str
    start: float
    expiry: float
    via: str


def _parse(line: str, where: str) -> tuple[str, dict[str, Any]]:
    if len(line) > MAX_LINE:
        raise LeaseLogError(f"{where}: record of {len(line)} characters exceeds {MAX_LINE}")
    try:
        rec = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise LeaseLogError(f"{where}: not a JSON record ({exc})") from None
    if not isinstance(rec, dict):
        raise LeaseLogError(f"{where}: a record must be a JSON object")
    op = rec.get("op")
    gpus = rec.get("gpus")
    if op not in ("grant", "release"):
        raise LeaseLogError(f"{where}: op {op!r} must be 'grant' or 'release'")
    if not isinstance(gpus, list) or not all(isinstance(g, str) and g for g in gpus):
        raise LeaseLogError(f"{where}: gpus must be a list of GPU ids")
    if op == "grant":
        if not isinstance(rec.get("app"), str) or not rec["app"]:
            raise LeaseLogError(f"{where}: app must be a non-empty string")
        for name in ("start", "expiry"):
            v = rec.get(name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise LeaseLogError(f"{where}: {name} must be a finite number")
        if not isinstance(rec.get("via", ""), str):
            raise LeaseLogError(f"{where}: via must be a string")
    return op, rec


def read_log(path: Path) -> dict[str, LoggedLease]:
    """Fold the log at ``path`` (missing: empty): GPU id -> its latest lease, dead or alive."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise LeaseLogError(f"lease log {path}: {exc.strerror or exc}") from None
    if size > MAX_FILE:
        raise LeaseLogError(f"lease log {path}: {size} bytes exceeds {MAX_FILE}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LeaseLogError(f"lease log {path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise LeaseLogError(f"lease log {path}: {exc.strerror or exc}") from None
    lines = text.split("\n")
    torn = lines.pop()  # "" when the file ends with a newline
    if torn:
        log.warning("lease log %s: ignoring the unfinished last line %d (a write cut short "
                    "by a crash)", path, len(lines) + 1)
    if not lines:
        return {}
    if lines[0].strip() != json.dumps(HEADER):
        raise LeaseLogError(f"lease log {path}:1: expected the header {json.dumps(HEADER)}")
    out: dict[str, LoggedLease] = {}
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        op, rec = _parse(line, f"lease log {path}:{n}")
        for g in rec["gpus"]:
            if op == "release":
                out.pop(g, None)
            else:
                out[g] = LoggedLease(rec["app"], g, float(rec["start"]),
                                     float(rec["expiry"]), rec.get("via", ""))
    return out


def _grant_line(app_id: str, gpus: Sequence[str], start: float, expiry: float,
                via: str) -> str:
    return json.dumps({"op": "grant", "app": app_id, "gpus": list(gpus), "start": start,
                       "expiry": expiry, "via": via}, separators=(",", ":"))


class LeaseLog:
    """The open log of one arbiter (not thread-safe: the arbiter core holds its lock)."""

    def __init__(self, path: Path, *, compact_after: int = 4096) -> None:
        self.path = path
        self.compact_after = compact_after
        self._fd: int | None = None
        self._records = 0

    def open(self, now: float, gpu_ids: Iterable[str]) -> list[LeaseGrant]:
        """Replay the log: the leases alive at ``now`` on GPUs of ``gpu_ids`` (one grant per
        app and (start, expiry, via)); the log is rewritten to hold exactly those."""
        known = set(gpu_ids)
        live: list[LoggedLease] = []
        for lease in read_log(self.path).values():
            if lease.expiry <= now:
                continue
            if lease.gpu_id not in known:
                log.warning("lease log %s: dropping %s's lease on GPU %r: not in the cluster",
                            self.path, lease.app_id, lease.gpu_id)
                continue
            live.append(lease)
        groups: dict[tuple[str, float, float, str], list[str]] = {}
        for x in live:
            groups.setdefault((x.app_id, x.start, x.expiry, x.via), []).append(x.gpu_id)
        grants = [LeaseGrant(a, tuple(sorted(g)), s, e, v)
                  for (a, s, e, v), g in sorted(groups.items())]
        self.compact(grants)
        return grants

    def compact(self, grants: Iterable[LeaseGrant]) -> None:
        """Rewrite the log as the header plus ``grants`` (atomically: temp file, fsync,
        rename, fsync of the directory) and keep it open for appending; on a failure
        before the rename the old log stays open."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        body = [json.dumps(HEADER)] + [_grant_line(g.app_id, g.gpus, g.start, g.expiry, g.via)
                                       for g in grants]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, ("\n".join(body) + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            new = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            dfd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as exc:  # before the rename the old log is whole and still open
            raise LeaseLogError(f"lease log {self.path}: {exc.strerror or exc}") from None
        self.close()
        self._fd = new
        self._records = len(body) - 1

    @property
    def needs_compaction(self) -> bool:
        return self._records > self.compact_after

    def _append(self, lines: Sequence[str]) -> None:
        if not lines:
            return
        if self._fd is None:
            raise LeaseLogError(f"lease log {self.path}: not open")
        data = ("\n".join(lines) + "\n").encode()
        try:
            written = os.write(self._fd, data)
            if written != len(data):
                raise OSError(f"short write ({written} of {len(data)} bytes)")
            os.fsync(self._fd)
        except OSError as exc:
            raise LeaseLogError(f"lease log {self.path}: {exc}") from None
        self._records += len(lines)

    def grants(self, grants: Sequence[LeaseGrant]) -> None:
        """Make ``grants`` durable (before anyone is told of them)."""
        self._append([_grant_line(g.app_id, g.gpus, g.start, g.expiry, g.via)
                      for g in grants])

    def release(self, gpu_ids: Sequence[str]) -> None:
        """Record that the leases on ``gpu_ids`` ended before their expiry."""
        if gpu_ids:
            self._append([json.dumps({"op": "release", "gpus": list(gpu_ids)},
                                     separators=(",", ":"))])

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
