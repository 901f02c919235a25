"""The older standalone spec format (docs/standalone.md, "Cluster and app specs"): top-level
``seed`` and ``submit_at_s``, the job's arguments directly under ``job``,
``hyperband.max_gpus_per_job``. :func:`is_old_standalone` recognises it,
:func:`convert_standalone` converts it to the one format and :func:`old_path` names a
converted field as it was written; :func:`themis.am.specfile.load_spec` reads such a file
with a deprecation message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: the older standalone format's fields (docs/standalone.md, "Cluster and app specs")
_OLD_TOP = ("seed", "submit_at_s")
_JOB_KEYS = {"command", "args", "env", "max_restarts", "docker_image"}
#: where a converted field was in the older standalone format (for messages)
_OLD_PATHS = (("hyperband.seed", "seed"), ("standalone.submit_at_s", "submit_at_s"),
              ("resources.gpus", "hyperband.max_gpus_per_job"), ("job.args", "job"))


def is_old_standalone(doc: Any) -> bool:
    """Whether ``doc`` is in the older standalone format: top-level ``seed`` or
    ``submit_at_s``, ``hyperband.max_gpus_per_job``, no ``job`` section, or a ``job``
    section holding the bundled job's arguments directly."""
    if not isinstance(doc, Mapping) or not doc:
        return False
    hb, job = doc.get("hyperband"), doc.get("job")
    return (any(k in doc for k in _OLD_TOP) or "job" not in doc
            or (isinstance(hb, Mapping) and "max_gpus_per_job" in hb)
            or (isinstance(job, Mapping) and bool(set(job) - _JOB_KEYS)))


def convert_standalone(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The older standalone format in the one format, with that format's defaults made
    explicit (bracket s=1 of R=3, eta=3 when neither is given; 30 steps per unit)."""
    new = {k: v for k, v in doc.items() if k not in (*_OLD_TOP, "hyperband", "job")}
    hb = doc.get("hyperband", {})
    if isinstance(hb, Mapping):
        hb = dict(hb)
        new["resources"] = {"gpus": hb.pop("max_gpus_per_job", 1)}
        if "max_resource" not in hb and "eta" not in hb:
            hb.setdefault("brackets", [1])
        hb = {"max_resource": 3, "eta": 3, **hb}
        hb.setdefault("steps_per_unit", 30)
        if "seed" in doc:
            hb["seed"] = doc["seed"]
    new["hyperband"] = hb
    new["job"] = {"args": {} if doc.get("job") is None else doc["job"]}
    if "submit_at_s" in doc:
        new["standalone"] = {"submit_at_s": doc["submit_at_s"]}
    return new


def old_path(field_: str) -> str:
    """Where the converted field ``field_`` was in the older format (for messages)."""
    for new, old in _OLD_PATHS:
        if field_ == new or field_.startswith(new + "."):
            return old + field_[len(new):]
    return field_
