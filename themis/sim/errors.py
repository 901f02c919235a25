"""Errors raised by the simulator. Each message names the file/app/GPU and the problem."""


class SimError(RuntimeError):
    """Base class of simulator errors."""


class InvariantError(SimError):
    """A built-in invariant check failed (a GPU held twice, capacity exceeded, work lost)."""


class SpecError(SimError, ValueError):
    """A cluster spec, workload file or trace line is malformed (names the file and line)."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


class UnknownPolicy(SimError, ValueError):
    """A policy name is not registered; the message lists the valid ones."""
