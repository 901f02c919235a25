"""Solver back-ends for the proportional-fair MILP (one interface, many back-ends)."""

from themis.mechanism.solvers.auto import (
    BACKENDS,
    DEFAULT_SOLVER,
    SERVICE_SOLVERS,
    SOLVER_NAMES,
    FallbackSolver,
    make_solver,
)
from themis.mechanism.solvers.base import (
    Bundle,
    PackingProblem,
    Solution,
    Solver,
    SolverError,
    SolverUnavailable,
    evaluate,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_SOLVER",
    "SERVICE_SOLVERS",
    "SOLVER_NAMES",
    "Bundle",
    "FallbackSolver",
    "PackingProblem",
    "Solution",
    "Solver",
    "SolverError",
    "SolverUnavailable",
    "evaluate",
    "make_solver",
]
