"""Typing of the compiled menu core (themis/mechanism/_menu.c); see themis.mechanism.bids."""

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar, final

from themis.mechanism.topology import Gpu

_Row = TypeVar("_Row")

@final
class Offer:
    """An offer indexed for menu construction (made by :func:`offer`)."""

    @property
    def size(self) -> int: ...

def offer(gpus: Sequence[Gpu], /) -> Offer | None: ...
def menu(
    offer: Offer,
    held: Sequence[Gpu],
    previous: Iterable[str],
    max_new: int,
    per_k: int,
    ties: dict[str, int],
    salt: str,
    tie_of: Callable[[dict[str, int], str, str], int],
    /,
) -> list[list[Gpu]]: ...
def bids(
    offer: Offer,
    held: Sequence[Gpu],
    previous: Iterable[str],
    max_new: int,
    per_k: int,
    ties: dict[str, int],
    salt: str,
    tie_of: Callable[[dict[str, int], str, str], int],
    remaining: tuple[float, Sequence[tuple[int, float]], Sequence[tuple[float, float, int]]],
    slowdowns: Sequence[float],
    elapsed: float,
    t_id: float,
    rho_current: float,
    bid_type: Callable[[tuple[str, ...], float], _Row],
    /,
) -> tuple[_Row, ...]: ...
