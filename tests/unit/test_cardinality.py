"""The maximum number of starving apps served at once (lpbb's count cut)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from themis.mechanism.solvers.base import Bundle, PackingProblem
from themis.mechanism.solvers.bruteforce import BruteForceSolver
from themis.mechanism.solvers.cardinality import MaxServed


def brute(menus: list[list[int]], excluded: int | None) -> int:
    """The reference: the exhaustive back-end on the problem with every bundle worth 1."""
    problem = PackingProblem(6, tuple(tuple(Bundle(m, 1.0) for m in ms) for ms in menus))
    return round(BruteForceSolver().solve(problem, excluded).objective)


def test_pigeonhole_three_apps_two_gpus() -> None:
    # three apps whose menus name only GPUs 0 and 1: two can be served, with or without
    # any one of them
    menus = [[0b01, 0b10], [0b01], [0b10, 0b11]]
    ms = MaxServed(menus, 1000)
    assert ms.maximum(None) == 2
    assert [ms.maximum(e) for e in range(3)] == [2, 2, 2]


def test_everyone_served_gives_one_less_without_a_served_app() -> None:
    menus = [[0b001], [0b010, 0b011], [0b100]]
    ms = MaxServed(menus, 1000)
    assert ms.maximum(None) == 3 == ms.bidders
    assert [ms.maximum(e) for e in range(3)] == [2, 2, 2]


def test_app_without_bundles_is_not_counted() -> None:
    ms = MaxServed([[0b01], [], [0b10]], 1000)
    assert ms.bidders == 2
    assert ms.maximum(None) == 2
    assert ms.maximum(1) == 2  # never served: removing it changes nothing
    assert ms.maximum(0) == 1


def test_over_budget_is_none() -> None:
    # five apps bidding on overlapping pairs of 6 GPUs: not provable within 1 node
    menus = [[8, 5], [24, 12], [12, 18], [18, 6], [17, 20]]
    assert MaxServed(menus, 1).maximum(None) is None
    assert MaxServed(menus, 1000).maximum(None) == brute(menus, None)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(1, 63), max_size=4), min_size=1, max_size=5))
def test_matches_brute_force(menus: list[list[int]]) -> None:
    ms = MaxServed(menus, 100_000)
    assert ms.maximum(None) == brute(menus, None)
    for e in range(len(menus)):
        assert ms.maximum(e) == brute(menus, e)


def test_identical_menus_are_searched_as_one_class() -> None:
    # twelve apps with the same menu over 6 single GPUs and two pairs of them: six can be
    # served. App by app, the search would try the apps' orders; as one class of 12 it
    # proves the bound at once.
    singles = [1 << g for g in range(6)]
    menu = [*singles, 0b11, 0b1100, 0b111]  # the pairs and the triple contain singles
    ms = MaxServed([menu] * 12, 100)
    assert ms.maximum(None) == 6
    assert ms.maximum(3) == 6  # six others are left to serve
    assert ms.nodes < 20
    assert len(ms.bundles) == 1 and ms.size == [12]


def test_a_class_one_app_short() -> None:
    # two classes: three apps on GPUs {0, 1, 2}, one app on {2} alone. Everyone: 3 (the
    # lone app takes GPU 2 or one of the three does). Without the lone app: 3; without one
    # of the three: 3 (the other two on 0 and 1, the lone app on 2).
    trio = [0b001, 0b010, 0b100]
    ms = MaxServed([trio, trio, trio, [0b100]], 1000)
    assert ms.maximum(None) == 3
    assert [ms.maximum(e) for e in range(4)] == [3, 3, 3, 3]
    # with a fourth app in the trio's class nothing changes but who is left out
    ms = MaxServed([trio] * 4 + [[0b100]], 1000)
    assert ms.maximum(None) == 3
    assert [ms.maximum(e) for e in range(5)] == [3] * 5


POOL = [[0b000011], [0b000001, 0b000110], [0b001100, 0b110000], [0b000100],
        [0b010000, 0b100001], [0b111000]]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(POOL), min_size=1, max_size=6))
def test_matches_brute_force_with_repeated_menus(menus: list[list[int]]) -> None:
    ms = MaxServed(menus, 100_000)
    assert ms.maximum(None) == brute(menus, None)
    for e in range(len(menus)):
        assert ms.maximum(e) == brute(menus, e)


def test_large_classes_do_not_enumerate_their_equivalent_choices() -> None:
    # class A: 12 apps over 12 single GPUs; class B: 12 apps over singles 0-3 and the
    # pairs {4, 5}, {6, 7}. At most 12 apps fit on 12 GPUs (A alone does it). The choices
    # of 12 of A's bundles, or of n of B's, are many but equivalent for the last class
    # searched.
    singles = [1 << g for g in range(12)]
    menus = [singles] * 12 + [[*singles[:4], 0b110000, 0b11000000]] * 12
    ms = MaxServed(menus, 2_000)
    assert ms.maximum(None) == 12
    assert ms.nodes < 100  # 401 when every equivalent choice was visited
    assert ms.maximum(0) == 12  # B's four singles and A's other eight GPUs
