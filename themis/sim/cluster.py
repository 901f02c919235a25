"""Simulated clusters (paper section 6.1, footnote 6) and cluster spec files.

Footnote 6 lists 16 8-GPU machines (4 slots x 2 GPUs), 6 4-GPU machines (4 slots x 1)
and 16 1-GPU machines: 16*8 + 6*4 + 16*1 = 168 GPUs, not the 256 the text states. We keep
the three machine shapes and their mix and scale the counts to 256 GPUs:
24 x 8 + 9 x 4 + 28 x 1 = 192 + 36 + 28 = 256 (ratios 24:9:28 ~ 16:6:16 x 1.52). Machines
are dealt round-robin over 8 racks (about 32 GPUs per rack) so every rack mixes shapes.
``scale`` shrinks every count proportionally (section 6.2.2: 1/2 and 1/4 of the cluster).

Spec files (JSON or YAML)::

    {"racks": [{"name": "r0", "machines": [{"name": "m0", "slots": [2, 2, 2, 2]}]}]}

or the compact form ``{"shapes": [{"count": 24, "slots": [2,2,2,2]}, ...], "racks": 8}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from themis.docfile import DocumentError, read_document
from themis.mechanism.topology import Gpu, Topology, TopologyError
from themis.sim.errors import SpecError

#: (machine count, GPUs per slot for each slot) of the 256-GPU cluster (see module doc).
DEFAULT_SHAPES: tuple[tuple[int, tuple[int, ...]], ...] = (
    (24, (2, 2, 2, 2)),
    (9, (1, 1, 1, 1)),
    (28, (1,)),
)
DEFAULT_RACKS = 8


def build_cluster(
    shapes: Sequence[tuple[int, Sequence[int]]], racks: int, prefix: str = ""
) -> Topology:
    """Machines of the given shapes dealt round-robin over ``racks`` racks."""
    if racks < 1:
        raise SpecError("cluster", f"racks={racks} must be >= 1")
    gpus: list[Gpu] = []
    m = 0
    for count, slots in shapes:
        for _ in range(count):
            rack = f"{prefix}r{m % racks}"
            machine = f"{prefix}m{m:03d}"
            for s, per_slot in enumerate(slots):
                for k in range(per_slot):
                    gpus.append(Gpu(f"{machine}/g{s}{k}", machine, rack, f"s{s}"))
            m += 1
    if not gpus:
        raise SpecError("cluster", "no GPU")
    return Topology(gpus)


def default_cluster(scale: float = 1.0) -> Topology:
    """The 256-GPU heterogeneous cluster, optionally scaled (counts rounded, >= 1 each)."""
    if not 0 < scale <= 16:
        raise SpecError("cluster", f"scale={scale} must be in (0, 16]")
    shapes = [(max(1, round(c * scale)), s) for c, s in DEFAULT_SHAPES]
    return build_cluster(shapes, max(1, round(DEFAULT_RACKS * scale)))


def _load_doc(path: Path) -> Any:
    try:
        return read_document(path)
    except DocumentError as exc:
        raise SpecError(str(path), exc.problem) from exc


def _slots(where: str, value: Any) -> list[int]:
    ok = isinstance(value, list) and len(value) > 0
    ok = ok and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)
    if not ok:
        raise SpecError(where, f"'slots' must be a non-empty list of ints >= 1, got {value!r}")
    return list(value)


def cluster_from_doc(doc: Any, where: str) -> Topology:
    """Build a topology from a parsed spec document (see module doc)."""
    if not isinstance(doc, dict):
        raise SpecError(where, "top level must be a mapping")
    try:
        if "shapes" in doc:
            racks = doc.get("racks", 1)
            if not isinstance(racks, int) or racks < 1:
                raise SpecError(where, f"'racks' must be an int >= 1, got {racks!r}")
            shapes = []
            for i, s in enumerate(doc["shapes"]):
                at = f"{where}: shapes[{i}]"
                if not isinstance(s, dict) or not isinstance(s.get("count"), int) or s["count"] < 1:
                    raise SpecError(at, "needs 'count' (int >= 1) and 'slots'")
                shapes.append((s["count"], _slots(at, s.get("slots"))))
            return build_cluster(shapes, racks)
        racks_doc = doc.get("racks")
        if not isinstance(racks_doc, list) or not racks_doc:
            raise SpecError(where, "needs 'racks' (a non-empty list) or 'shapes'")
        gpus: list[Gpu] = []
        for r, rack in enumerate(racks_doc):
            at = f"{where}: racks[{r}]"
            if not isinstance(rack, dict) or not isinstance(rack.get("machines"), list):
                raise SpecError(at, "needs 'machines' (a list)")
            rname = str(rack.get("name", f"r{r}"))
            for m, mach in enumerate(rack["machines"]):
                mat = f"{at}.machines[{m}]"
                if not isinstance(mach, dict):
                    raise SpecError(mat, "must be a mapping with 'slots'")
                mname = str(mach.get("name", f"{rname}m{m}"))
                for s, n in enumerate(_slots(mat, mach.get("slots"))):
                    for k in range(n):
                        gpus.append(Gpu(f"{mname}/g{s}{k}", mname, rname, f"s{s}"))
        if not gpus:
            raise SpecError(where, "no GPU")
        return Topology(gpus)
    except TopologyError as exc:
        raise SpecError(where, str(exc)) from exc


def load_cluster(spec: str | None) -> Topology:
    """``None``/"default" -> 256 GPUs; "default:0.5" -> scaled; else a JSON/YAML file."""
    if spec is None or spec == "default":
        return default_cluster()
    if spec.startswith("default:"):
        try:
            scale = float(spec.split(":", 1)[1])
        except ValueError as exc:
            raise SpecError(spec, "scale after 'default:' must be a number") from exc
        return default_cluster(scale)
    path = Path(spec)
    if not path.is_file():
        raise SpecError(spec, "cluster spec file not found")
    return cluster_from_doc(_load_doc(path), str(path))
