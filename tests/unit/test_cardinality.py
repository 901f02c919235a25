"""The maximum number of starving apps served at once (lpbb's count cut)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from themis.arbiter.solvers.base import Bundle, PackingProblem
from themis.arbiter.solvers.bruteforce import BruteForceSolver
from themis.arbiter.solvers.cardinality import MaxServed


def brute(menus: list[list[int]], excluded: int | None) -> int:
    """The reference: the exhaustive back-end on the problem with every bundle worth 1."""
    problem = PackingProblem(6, tuple(tuple(Bundle(m, 1.0) for m in ms) for ms in menus))
    return round(BruteForceSolver().solve(problem, excluded).objective)


def test_pigeonhole_three_apps_two_gpus() -> None:
    # three apps whose menus name only GPUs 0 and 1: two can be served, with or without
    # any one of them
    menus = [[0b01, 0b10], [0b01], [0b10, 0b11]]
    ms = MaxServed(2, menus, 1000)
    assert ms.maximum(None) == 2
    assert [ms.maximum(e) for e in range(3)] == [2, 2, 2]


def test_everyone_served_gives_one_less_without_a_served_app() -> None:
    menus = [[0b001], [0b010, 0b011], [0b100]]
    ms = MaxServed(3, menus, 1000)
    assert ms.maximum(None) == 3 == ms.bidders
    assert [ms.maximum(e) for e in range(3)] == [2, 2, 2]


def test_app_without_bundles_is_not_counted() -> None:
    ms = MaxServed(2, [[0b01], [], [0b10]], 1000)
    assert ms.bidders == 2
    assert ms.maximum(None) == 2
    assert ms.maximum(1) == 2  # never served: removing it changes nothing
    assert ms.maximum(0) == 1


def test_over_budget_is_none() -> None:
    # five apps bidding on overlapping pairs of 6 GPUs: not provable within 1 node
    menus = [[8, 5], [24, 12], [12, 18], [18, 6], [17, 20]]
    assert MaxServed(6, menus, 1).maximum(None) is None
    assert MaxServed(6, menus, 1000).maximum(None) == brute(menus, None)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(1, 63), max_size=4), min_size=1, max_size=5))
def test_matches_brute_force(menus: list[list[int]]) -> None:
    ms = MaxServed(6, menus, 100_000)
    assert ms.maximum(None) == brute(menus, None)
    for e in range(len(menus)):
        assert ms.maximum(e) == brute(menus, e)
