"""What the AM accepts on ``POST /api/report`` (docs/yarn.md, "Security"; docs/am.md,
"Progress").

A report is checked in this order, and refused at the first failure with an HTTP status and
one message naming the problem; a refused report changes nothing in the AM:

1. **Who.** The container named by the ``X-Themis-Container`` header and its token
   (``X-Themis-Report-Token``, :class:`~themis.hadoop.security.ReportTokens`): 401 / 403,
   before a byte of the body is read.
2. **How much.** ``Content-Length``: missing -> 411, not a decimal number -> 400, over
   :data:`MAX_REPORT_BYTES` -> 413 (the body is not read).
3. **What.** The body, parsed by :func:`themis.safeinput.load_json` under
   :data:`REPORT_LIMITS` (UTF-8, nesting, number magnitude, duplicate keys), then its shape
   (:func:`parse_report`): the fields the AM uses have the types it uses them as -> 400
   naming the field (``events[3].step: ...``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from themis.safeinput import InputError, Limits, load_json, short

MAX_REPORT_BYTES = 1 << 20  # a runner's report between two sends is a few KB
REPORT_LIMITS = Limits(max_bytes=MAX_REPORT_BYTES, max_depth=16, max_nodes=100_000)
REPORT_READ_TIMEOUT_S = 10.0  # a client that stalls mid-request is dropped


class ReportRefused(Exception):
    """A report the AM does not accept: HTTP ``status`` and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def content_length(header: str | None) -> int:
    """The body's size from the ``Content-Length`` header, within :data:`MAX_REPORT_BYTES`."""
    if header is None:
        raise ReportRefused(411, "Content-Length is required")
    text = header.strip()
    if not text.isdecimal() or not text.isascii() or len(text) > 20:
        raise ReportRefused(400, f"Content-Length {short(header)} is not a byte count")
    n = int(text)
    if n > MAX_REPORT_BYTES:
        raise ReportRefused(413, f"report of {n} bytes exceeds the limit of "
                                 f"{MAX_REPORT_BYTES} bytes")
    return n


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _check(ok: bool, where: str, want: str, value: Any) -> None:
    if not ok:
        raise ReportRefused(400, f"report: {where}: {short(value)} must be {want}")


def parse_report(data: bytes, container: str) -> dict[str, Any]:
    """The report in ``data`` from ``container`` (the authenticated one), with its
    ``container`` field set to it. Raises :class:`ReportRefused` (400)."""
    try:
        doc = load_json(data, REPORT_LIMITS)
    except InputError as exc:
        raise ReportRefused(400, f"report: {exc}") from None
    _check(isinstance(doc, dict), "(top level)", "a JSON object", doc)
    named = doc.get("container", container)
    _check(named == container, "container", f"the container of the token ({container!r})",
           named)
    checks: tuple[tuple[str, str, Callable[[Any], bool]], ...] = (
        ("job_id", "a string", lambda v: isinstance(v, str)),
        ("run_id", "an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
        ("final", "true or false", lambda v: isinstance(v, bool)),
        ("steps", "an integer >= 0",
         lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0),
        ("loss", "a number or null", lambda v: v is None or _number(v)),
        ("serial_iter_time", "a number or null", lambda v: v is None or _number(v)),
        # where the objective's value came from, else the scalar tags seen (the profiler)
        ("objective_source", "a string or null",
         lambda v: v is None or (isinstance(v, str) and len(v) <= 512)),
        ("tags", "a list of at most 256 strings", lambda v: isinstance(v, list)
         and len(v) <= 256 and all(isinstance(t, str) and len(t) <= 512 for t in v)),
        # a distributed job's task announcing its port (rendezvous, themis.am.taskgroup)
        ("port", "a TCP port (1-65535)",
         lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 < v < 65536),
    )
    for name, want, ok in checks:
        if name in doc:
            _check(ok(doc[name]), name, want, doc[name])
    events = doc.get("events", [])
    _check(isinstance(events, list), "events", "a list", events)
    for i, e in enumerate(events):
        _check(isinstance(e, dict), f"events[{i}]", "a JSON object", e)
        _check(isinstance(e.get("event"), str), f"events[{i}].event", "a string",
               e.get("event"))
        for name in ("time", "step", "seconds"):
            if name in e:
                _check(_number(e[name]), f"events[{i}].{name}", "a number", e[name])
        if "restored_from" in e:
            _check(e["restored_from"] is None or isinstance(e["restored_from"], str),
                   f"events[{i}].restored_from", "a string or null", e["restored_from"])
    report: dict[str, Any] = doc
    report["container"] = container
    return report
