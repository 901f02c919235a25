"""The parts of an app spec (:class:`themis.am.spec.AppSpec`): the settings of its
sections, each a frozen dataclass with the format's defaults (``resources``,
``tasks.ps``, ``tensorboard``, ``am``, ``hyperband``; docs/am.md, "Spec format").

They sit below the model and its checks (:mod:`themis.am.speccheck` builds them from a
loaded document); ``AppSpec`` holds one of each.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Resources:
    gpus: int = 1
    memory_mb: int = 1024
    vcores: int = 1


@dataclass(frozen=True, slots=True)
class PsTasks:
    """The parameter servers of a distributed job (``tasks.ps``)."""

    count: int = 0
    memory_mb: int = 1024
    vcores: int = 1
    command: str = ""  # "" = job.command
    docker_image: str = ""  # YARN's Docker runtime ("" = job.docker_image)


@dataclass(frozen=True, slots=True)
class TensorBoardSettings:
    """``tensorboard``: a TensorBoard container for the app (YARN only; Submarine's
    ``--tensorboard``), serving the jobs' event files kept in HDFS."""

    memory_mb: int = 1024
    vcores: int = 1
    docker_image: str = ""  # YARN's Docker runtime ("" = the NodeManager's environment)


@dataclass(frozen=True, slots=True)
class AmResources:
    memory_mb: int = 768
    vcores: int = 1
    max_attempts: int = 2


@dataclass(frozen=True, slots=True)
class HyperbandSettings:
    max_resource: float = 9.0
    eta: int = 3
    steps_per_unit: int = 10
    brackets: tuple[int, ...] | None = None
    seed: int = 0
