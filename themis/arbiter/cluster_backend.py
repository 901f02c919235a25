"""Cluster back-ends of the arbiter service: who owns which GPU.

The service asks the back-end for the cluster's GPUs and the free ones, applies round
grants and revokes expired or released leases. The static back-end below is a cluster
declared in a JSON/YAML file; the YARN RM plugin provides another one.

Spec format (JSON or YAML)::

    racks:
      - name: r0
        machines:
          - {name: m0, gpus: 4, gpus_per_slot: 2}   # ids m0-g0..m0-g3, slots s0, s1
          - {name: m1, gpus: 4}                      # one slot per GPU
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from themis.docfile import DocumentError, read_document
from themis.mechanism.fairness import ClusterShape
from themis.mechanism.round import LeaseGrant
from themis.mechanism.topology import Gpu, Topology


class ClusterSpecError(ValueError):
    """The cluster spec file is malformed (names the field)."""


class BackendError(RuntimeError):
    """A grant or revoke is inconsistent with the back-end's ownership table."""


class ClusterBackend(ABC):
    """What the arbiter needs from the cluster. Implementations must be thread-safe."""

    @abstractmethod
    def topology(self) -> Topology:
        """All GPUs of the cluster."""

    @abstractmethod
    def free_gpus(self) -> list[Gpu]:
        """GPUs owned by no app, in topology order."""

    @abstractmethod
    def apply(self, grants: Sequence[LeaseGrant]) -> None:
        """Hand each grant's GPUs to its app (all-or-nothing; the GPUs must be free)."""

    @abstractmethod
    def revoke(self, app_id: str, gpu_ids: Iterable[str]) -> None:
        """Take GPUs back from an app (GPUs it does not own are ignored)."""

    @abstractmethod
    def owners(self) -> dict[str, str]:
        """GPU id -> owning app id, for the GPUs that are owned."""

    def cluster_gpus(self) -> int:
        """R_C, the GPUs in the cluster (announced to agents for rho)."""
        return len(self.topology())

    def shape(self) -> ClusterShape | None:
        """The cluster's largest slot/machine/rack (announced to agents for the
        ``served-now`` key); None when unknown."""
        topo = self.topology()
        return ClusterShape.of(topo.values()) if len(topo) else None


class StaticCluster(ClusterBackend):
    """A fixed set of GPUs with an in-memory ownership table."""

    def __init__(self, gpus: Iterable[Gpu]) -> None:
        self._topo = Topology(gpus)
        if len(self._topo) == 0:
            raise ClusterSpecError("cluster has no GPU")
        self._owner: dict[str, str] = {}
        self._lock = threading.Lock()

    def topology(self) -> Topology:
        return self._topo

    def free_gpus(self) -> list[Gpu]:
        with self._lock:
            return [g for gid, g in self._topo.items() if gid not in self._owner]

    def apply(self, grants: Sequence[LeaseGrant]) -> None:
        with self._lock:
            wanted: dict[str, str] = {}
            for grant in grants:
                for gid in grant.gpus:
                    if gid not in self._topo:
                        raise BackendError(f"grant to {grant.app_id!r}: unknown GPU {gid!r}")
                    if gid in self._owner or gid in wanted:
                        holder = self._owner.get(gid, wanted.get(gid))
                        raise BackendError(
                            f"grant to {grant.app_id!r}: GPU {gid!r} is held by {holder!r}"
                        )
                    wanted[gid] = grant.app_id
            self._owner.update(wanted)

    def revoke(self, app_id: str, gpu_ids: Iterable[str]) -> None:
        with self._lock:
            for gid in gpu_ids:
                if self._owner.get(gid) == app_id:
                    del self._owner[gid]

    def owners(self) -> dict[str, str]:
        with self._lock:
            return dict(self._owner)


def _field(obj: Mapping[str, Any], key: str, where: str) -> Any:
    if not isinstance(obj, Mapping) or key not in obj:
        raise ClusterSpecError(f"{where}: missing field {key!r}")
    return obj[key]


def gpus_from_spec(spec: Mapping[str, Any]) -> list[Gpu]:
    racks = _field(spec, "racks", "cluster spec")
    if not isinstance(racks, list) or not racks:
        raise ClusterSpecError("cluster spec: 'racks' must be a non-empty list")
    gpus: list[Gpu] = []
    for r, rack in enumerate(racks):
        rname = str(_field(rack, "name", f"racks[{r}]"))
        machines = _field(rack, "machines", f"rack {rname!r}")
        if not isinstance(machines, list) or not machines:
            raise ClusterSpecError(f"rack {rname!r}: 'machines' must be a non-empty list")
        for m, machine in enumerate(machines):
            mname = str(_field(machine, "name", f"rack {rname!r} machines[{m}]"))
            n = _field(machine, "gpus", f"machine {mname!r}")
            per_slot = machine.get("gpus_per_slot", 1)
            for name, v in (("gpus", n), ("gpus_per_slot", per_slot)):
                if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                    raise ClusterSpecError(f"machine {mname!r}: {name}={v!r} must be an int >= 1")
            for i in range(n):
                gpus.append(Gpu(f"{mname}-g{i}", mname, rname, f"s{i // per_slot}"))
    return gpus


def load_cluster_spec(path: str | Path) -> StaticCluster:
    """Read a JSON (``.json``) or YAML cluster spec."""
    try:
        data = read_document(path)
    except DocumentError as exc:
        raise ClusterSpecError(f"cluster spec {str(exc.path)!r}: {exc.problem}") from exc
    return StaticCluster(gpus_from_spec(data))


def uniform_cluster(machines: int, gpus_per_machine: int, racks: int = 1) -> StaticCluster:
    """``machines`` machines spread round-robin over ``racks`` racks (tests, benchmarks)."""
    spec = {
        "racks": [
            {"name": f"r{r}", "machines": [
                {"name": f"m{m}", "gpus": gpus_per_machine}
                for m in range(machines) if m % racks == r
            ]}
            for r in range(racks)
        ]
    }
    return StaticCluster(gpus_from_spec(spec))
