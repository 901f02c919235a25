"""Solver back-ends for the proportional-fair MILP (one interface, many back-ends).

``make_solver`` takes the names of :mod:`~themis.mechanism.solvers.auto` and
``split:<name>`` (the split auction, :mod:`~themis.mechanism.solvers.split`)."""

from themis.mechanism.solvers.auto import (
    BACKENDS,
    DEFAULT_SOLVER,
    SOLVER_NAMES,
    FallbackSolver,
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
from themis.mechanism.solvers.split import (
    SERVICE_SOLVERS,
    SPLIT_PREFIX,
    SplitPolicy,
    SplitSolver,
    make_solver,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_SOLVER",
    "SERVICE_SOLVERS",
    "SOLVER_NAMES",
    "SPLIT_PREFIX",
    "Bundle",
    "FallbackSolver",
    "PackingProblem",
    "Solution",
    "Solver",
    "SolverError",
    "SolverUnavailable",
    "SplitPolicy",
    "SplitSolver",
    "evaluate",
    "make_solver",
]
