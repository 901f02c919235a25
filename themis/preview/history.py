"""A cluster's application history as the ResourceManager reports it: the body of
``GET /ws/v1/cluster/apps`` (``{"apps": {"app": [...]}}``), from the RM or a saved file.

Each app is read into a :class:`HistoryApp`; nothing is inferred here (that is
:mod:`themis.preview.trace`). Fields read per app (Hadoop's ``AppInfo``):

* ``id`` (required), ``name``, ``user``, ``queue``, ``applicationType``, ``state``,
  ``finalStatus`` (optional strings);
* ``startedTime`` (required: ms since the epoch; the RM sets it when the app is
  submitted), ``finishedTime`` (ms; 0 while the app runs), ``elapsedTime`` (ms; used when
  ``finishedTime`` is absent), ``launchTime`` (ms, optional: when the AM was launched);
* ``resourceSecondsMap``: the app's aggregate resource-seconds per resource type,
  ``{"entry": [{"key": "yarn.io/gpu", "value": "7200"}, ...]}`` (Hadoop >= 3.1; values are
  strings of integers). A single entry may come as an object instead of a list, and
  Hadoop's documentation shows the entries as repeated ``"entry"`` keys of one object: all
  three forms are read.

Every defect is one :class:`PreviewError` naming the source, the app (numbered from 1 in
the response's order, with its id when it has one) and the problem, e.g.
``apps.json: app 7 (application_1_0007) has no 'startedTime'``; a body that is not JSON
names the line and column (and says when the body ends early: a truncated download).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the YARN resource type of GPUs (resource-types.xml, ``yarn.io/gpu``)
GPU_RESOURCE = "yarn.io/gpu"
#: the largest response read (an RM keeps at most yarn.resourcemanager.max-completed-
#: applications finished apps, 1,000 by default; 10,000 apps are about 15 MB of JSON)
MAX_RESPONSE_BYTES = 1 << 30
#: the largest time in ms accepted (year 2286): anything larger is not a timestamp
MAX_TIME_MS = 10**13


class PreviewError(ValueError):
    """Input the preview cannot use: ``where`` (a file, a URL, an option) and the problem,
    printed as one line."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}" if where else problem)
        self.where = where
        self.problem = problem


@dataclass(frozen=True, slots=True)
class HistoryApp:
    """One application of the RM's response, as read (times in ms since the epoch)."""

    number: int  # position in the response, from 1
    id: str
    name: str
    user: str
    queue: str
    app_type: str
    state: str
    final_status: str
    started_ms: int
    finished_ms: int  # 0: not finished
    launch_ms: int  # 0: not reported
    gpu_seconds: float | None  # None: no yarn.io/gpu entry in resourceSecondsMap

    @property
    def finished(self) -> bool:
        return self.finished_ms > 0

    @property
    def observed_jct_s(self) -> float:
        """finishedTime - startedTime, in seconds (the app's JCT on the real cluster)."""
        return (self.finished_ms - self.started_ms) / 1000.0


def _pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
    """JSON objects: repeated ``"entry"`` keys (the form of Hadoop's documentation) are
    collected into a list; any other repeated key is refused."""
    out: dict[str, Any] = {}
    for k, v in items:
        if k in out:
            if k != "entry":
                raise _Duplicate(k)
            prev = out[k]
            out[k] = [*prev, v] if isinstance(prev, list) else [prev, v]
        else:
            out[k] = v
    return out


class _Duplicate(ValueError):
    pass


def _constant(text: str) -> Any:
    raise ValueError(f"{text} is not a JSON number")


def parse_json(data: bytes, source: str) -> Any:
    """``data`` as JSON (strict: no NaN/Infinity, no repeated keys except ``entry``)."""
    if len(data) > MAX_RESPONSE_BYTES:
        raise PreviewError(source, f"larger than the limit of {MAX_RESPONSE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise PreviewError(source, f"not JSON (line {line}: not UTF-8 text, byte "
                                   f"0x{data[exc.start]:02x})") from None
    if not text.strip():
        raise PreviewError(source, "empty (no JSON document)")
    try:
        return json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        what = "truncated: the JSON ends early" if _ends_early(text, exc) else "not JSON"
        raise PreviewError(source, f"{what} (line {exc.lineno} col {exc.colno}: {exc.msg})"
                           ) from None
    except _Duplicate as exc:
        raise PreviewError(source, f"not valid JSON for the RM: the key {str(exc)!r} is "
                                   "repeated in one object") from None
    except ValueError as exc:  # NaN, Infinity
        raise PreviewError(source, f"not JSON ({exc})") from None
    except RecursionError:
        raise PreviewError(source, "not JSON (nested too deeply)") from None


_NUMBER_PART = re.compile(r"[-+.\deE]+")  # what is left of a number cut short ("100.")


def _ends_early(text: str, exc: json.JSONDecodeError) -> bool:
    """Whether the document fails only because it stops: nothing after the error but
    whitespace, a string left open, or the start of a literal or a number."""
    rest = text[exc.pos:].strip()
    if not rest or exc.msg.startswith("Unterminated string"):
        return True
    if any(word.startswith(rest) for word in ("true", "false", "null")):
        return True
    return _NUMBER_PART.fullmatch(rest) is not None


def read_file(path: Path) -> bytes:
    """A saved response (bounded); a missing or unreadable file is a PreviewError."""
    try:
        with open(path, "rb") as fh:
            return fh.read(MAX_RESPONSE_BYTES + 1)
    except OSError as exc:
        raise PreviewError(str(path), f"cannot read: {exc.strerror or exc}") from None


def app_list(doc: Any, source: str) -> list[Any]:
    """The app objects of an apps response: ``{"apps": {"app": [...]}}``; the RM answers
    ``{"apps": null}`` when it has none."""
    if not isinstance(doc, dict) or "apps" not in doc:
        raise PreviewError(source, 'not an RM apps response: expected {"apps": {"app": '
                                   "[...]}} (GET /ws/v1/cluster/apps)")
    apps = doc["apps"]
    if apps is None or apps == {}:
        return []
    if not isinstance(apps, dict) or "app" not in apps:
        raise PreviewError(source, "'apps' must be an object with an 'app' list")
    items = apps["app"]
    if isinstance(items, dict):  # one app, unwrapped
        return [items]
    if not isinstance(items, list):
        raise PreviewError(source, "'apps.app' must be a list of apps")
    return items


def read_apps(doc: Any, source: str) -> list[HistoryApp]:
    """Every app of an apps response (see the module doc for the fields)."""
    return [read_app(a, i + 1, source) for i, a in enumerate(app_list(doc, source))]


def read_app(raw: Any, number: int, source: str) -> HistoryApp:
    if not isinstance(raw, dict):
        raise PreviewError(source, f"app {number} is not an object")
    app_id = raw.get("id")
    if not isinstance(app_id, str) or not app_id:
        raise PreviewError(source, f"app {number} has no 'id' (a non-empty string)")
    who = f"app {number} ({app_id[:80]})"

    def text(key: str) -> str:
        v = raw.get(key)
        if v is None:
            return ""
        if not isinstance(v, str):
            raise PreviewError(source, f"{who}: '{key}' is not a string")
        return v

    started = _time(raw, "startedTime", who, source, required=True)
    assert started is not None  # required
    finished = _time(raw, "finishedTime", who, source)
    if finished is None:
        elapsed = _time(raw, "elapsedTime", who, source)
        if elapsed is None:
            raise PreviewError(source, f"{who} has neither 'finishedTime' nor 'elapsedTime'")
        state = text("state")
        finished = started + elapsed if elapsed > 0 and state in _FINAL else 0
    if finished > 0 and finished < started:
        raise PreviewError(source, f"{who}: 'finishedTime' {finished} is before "
                                   f"'startedTime' {started}")
    return HistoryApp(
        number=number,
        id=app_id,
        name=text("name"),
        user=text("user"),
        queue=text("queue"),
        app_type=text("applicationType"),
        state=text("state"),
        final_status=text("finalStatus"),
        started_ms=started,
        finished_ms=max(0, finished),
        launch_ms=_time(raw, "launchTime", who, source) or 0,
        gpu_seconds=_gpu_seconds(raw.get("resourceSecondsMap"), who, source),
    )


_FINAL = ("FINISHED", "FAILED", "KILLED")


def _time(raw: Mapping[str, Any], key: str, who: str, source: str,
          required: bool = False) -> int | None:
    if key not in raw or raw[key] is None:
        if required:
            raise PreviewError(source, f"{who} has no '{key}'")
        return None
    v = raw[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise PreviewError(source, f"{who}: '{key}' {_short(v)} is not a number of ms")
    if v < 0 or v > MAX_TIME_MS:
        if key == "finishedTime" and v == -1:  # some RMs report -1 for "not finished"
            return 0
        raise PreviewError(source, f"{who}: '{key}' {_short(v)} is not a time in ms "
                                   f"(0 to {MAX_TIME_MS:.0e})")
    return int(v)


def _gpu_seconds(rsm: Any, who: str, source: str) -> float | None:
    """The ``yarn.io/gpu`` value of a resourceSecondsMap; None when it has none."""
    if rsm is None or rsm == {} or rsm == "":
        return None
    if not isinstance(rsm, dict):
        raise PreviewError(source, f"{who}: 'resourceSecondsMap' is not an object")
    entries = rsm.get("entry")
    if entries is None:
        return None
    if isinstance(entries, dict):
        entries = [entries]
    if not isinstance(entries, list):
        raise PreviewError(source, f"{who}: 'resourceSecondsMap.entry' is not a list")
    found: float | None = None
    for k, e in enumerate(entries):
        where = f"{who}: resourceSecondsMap entry {k + 1}"
        if not isinstance(e, dict) or not isinstance(e.get("key"), str):
            raise PreviewError(source, f"{where} has no 'key' (a string)")
        if e["key"] != GPU_RESOURCE:
            continue
        v = e.get("value")
        try:
            x = float(v) if isinstance(v, str | int | float) and not isinstance(v, bool) \
                else math.nan
        except ValueError:
            x = math.nan
        if not (math.isfinite(x) and x >= 0):
            raise PreviewError(source, f"{where} ({GPU_RESOURCE}): 'value' {_short(v)} is "
                                       "not a number of GPU-seconds >= 0")
        found = x
    return found


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:30] + "..."
