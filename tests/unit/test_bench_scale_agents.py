"""The scale benchmark's agent processes (bench/scale_agents.py --procs, bench/bench_scale.py
--agent-procs; docs/yarn.md "Scale"): how app ids are split over processes, how their JSON
lines merge into one, and the auction's share of a round read from the engine's rounds."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


agents = _load("scale_agents")
scale = _load("bench_scale")


@given(ids=st.lists(st.text(min_size=1, max_size=5), max_size=60), procs=st.integers(1, 20))
def test_split_keeps_every_id_once_in_order_in_balanced_groups(ids: list[str],
                                                               procs: int) -> None:
    groups = agents.split_ids(ids, procs)
    assert [x for g in groups for x in g] == ids  # every id once, in order
    assert len(groups) == min(procs, len(ids))
    assert all(groups)  # no process without agents
    if groups:
        sizes = [len(g) for g in groups]
        assert max(sizes) - min(sizes) <= 1
        assert sizes == sorted(sizes, reverse=True)  # the larger groups first


def test_split_by_hand() -> None:
    assert agents.split_ids(["a", "b", "c", "d", "e"], 2) == [["a", "b", "c"], ["d", "e"]]
    assert agents.split_ids(["a", "b"], 8) == [["a"], ["b"]]
    assert agents.split_ids(["a", "b", "c"], 1) == [["a", "b", "c"]]
    assert agents.split_ids([], 4) == []
    with pytest.raises(ValueError):
        agents.split_ids(["a"], 0)


def test_apps_file_lines_carry_an_optional_token() -> None:
    text = "application_1_0001 tok1\n\napplication_1_0002\n  application_1_0003   t3 \n"
    assert agents.parse_apps(text) == [("application_1_0001", "tok1"),
                                       ("application_1_0002", ""),
                                       ("application_1_0003", "t3")]


def test_registered_lines_merge_into_one_once_all_are_in() -> None:
    lines = [{"event": "registered", "n": 3, "s": 1.5},
             {"event": "registered", "n": 2, "s": 4.25}]
    assert agents.merge_registered(lines) == {"event": "registered", "n": 5, "s": 4.25,
                                              "procs": 2}
    with pytest.raises(ValueError):  # a process that has not registered yet
        agents.merge_registered([lines[0], {"event": "stats", "agents": 2}])
    with pytest.raises(ValueError):
        agents.merge_registered([])


def test_stats_lines_sum_and_the_rss_counts_the_parent() -> None:
    a = {"event": "stats", "agents": 3, "offers": 10, "bids": 9, "bids_rejected": 1,
         "allocations": 7, "reconnects": 0, "rss_mb": 40.5}
    b = {"event": "stats", "agents": 2, "offers": 6, "bids": 6, "bids_rejected": 0,
         "allocations": 4, "reconnects": 2, "rss_mb": -1.0}  # RSS unreadable: counts 0
    m = agents.merge_stats([a, b], own_rss_mb=20.0, final=True)
    assert m == {"event": "stats", "final": True, "agents": 5, "offers": 16, "bids": 15,
                 "bids_rejected": 1, "allocations": 11, "reconnects": 2, "rss_mb": 60.5,
                 "rss_mb_max": 40.5, "procs": 2}
    assert "final" not in agents.merge_stats([a])
    assert agents.merge_stats([])["agents"] == 0


def test_agent_procs_default_and_caps() -> None:
    assert scale.agent_procs(None, 50) == scale.DEFAULT_AGENT_PROCS == 8
    assert scale.agent_procs(None, 3) == 3  # no process without an agent
    assert scale.agent_procs(1, 500) == 1  # the single-process mode
    assert scale.agent_procs(16, 500) == 16
    assert scale.agent_procs(4, 0) == 1


def test_auction_share_is_the_median_over_rounds_with_bids() -> None:
    rounds = [
        {"bidders": 2, "elapsed_ms": 10.0, "bid_wait_ms": 6.0, "auction_ms": 1.0},
        {"bidders": 1, "elapsed_ms": 20.0, "bid_wait_ms": 9.0, "auction_ms": 10.0},
        {"bidders": 3, "elapsed_ms": 40.0, "bid_wait_ms": 30.0, "auction_ms": 4.0},
        {"bidders": 0, "elapsed_ms": 5.0, "bid_wait_ms": 0.0, "auction_ms": 0.0},  # no auction
        {"bidders": 2, "elapsed_ms": 9.0, "bid_wait_ms": 3.0, "auction_ms": None},  # old engine
    ]
    s = scale.auction_share(rounds)
    assert s["rounds"] == 5 and s["rounds_with_bids"] == 3
    assert s["median"] == pytest.approx(0.1)  # shares 0.1, 0.5, 0.1
    assert s["auction_ms_median"] == 4.0 and s["round_ms_median"] == 20.0
    assert s["bid_wait_ms_median"] == 9.0
    assert scale.auction_share([])["median"] is None


def test_engine_round_lines_carry_the_auction_time() -> None:
    line = ("12:00:00,000 INFO  [t] EngineSupervisor: [engine 7] 2026-11-29 12:00:00,000 INFO "
            "round 4: {'round': 4, 'bidders': ['a', 'b'], 'nonbidders': [], 'elapsed_ms': 12.5, "
            "'offered_gpus': 8, 'prepare_ms': 1.25, 'bid_wait_ms': 7.0, 'auction_ms': 2.5}")
    skipped = "[engine 7] x INFO round 5: {'round': 5, 'skipped': True}"
    (r,) = scale.engine_rounds(line + "\n" + skipped)
    assert r["round"] == 4 and r["bidders"] == 2 and r["auction_ms"] == 2.5
    assert r["rest_ms"] == pytest.approx(12.5 - 1.25 - 7.0, abs=0.1)
    assert scale.auction_share([r])["median"] == pytest.approx(0.2)


def test_summary_line_per_size() -> None:
    result = {"size": "quick", "agent_procs": 8,
              "lease_expiry": {"to_grant_ms": {"n": 5, "median": 100, "p95": 200, "max": 300},
                               "to_commit_ms": {"n": 4, "median": 150, "p95": 250},
                               "expiries": 5, "renewed_in_place": 7,
                               "granted_before_expiry": 2},
              "auction_share": {"median": 0.05}, "nongpu_per_s": {"ratio": 1.1}}
    assert scale.summary_line(result) == {
        "size": "quick", "agent_procs": 8,
        "expiry_to_grant_ms": {"median": 100, "p95": 200, "n": 5},
        "expiry_to_commit_ms": {"median": 150, "p95": 250, "n": 4},
        "expiries": 5, "renewed_in_place": 7, "granted_before_expiry": 2,
        "auction_share_median": 0.05, "nongpu_ratio": 1.1}
    assert scale.summary_line({"size": "mid", "error": "x"}) == {"size": "mid", "error": "x"}


OFFLINE_LOG = """[INFO] Scanning for projects...
[INFO] BUILD FAILURE
[ERROR] Plugin org.codehaus.mojo:build-helper-maven-plugin:3.6.0 or one of its dependencies \
could not be resolved: Cannot access central (https://repo.maven.apache.org/maven2) in offline \
mode and the artifact org.codehaus.mojo:build-helper-maven-plugin:jar:3.6.0 has not been \
downloaded from it before. -> [Help 1]
[ERROR]
[ERROR] To see the full stack trace of the errors, re-run Maven with the -e switch.
"""


def test_a_failed_run_names_mavens_first_error_and_what_to_do_offline() -> None:
    why = scale.maven_failure(OFFLINE_LOG, offline=True)
    assert why.startswith(": Plugin org.codehaus.mojo:build-helper-maven-plugin:3.6.0")
    assert why.endswith("(an artifact is missing from ~/.m2: run once without --offline)")
    # online, the same error gets no offline hint; a log without Maven errors adds nothing
    assert "without --offline" not in scale.maven_failure(OFFLINE_LOG, offline=False)
    assert scale.maven_failure("[INFO] BUILD SUCCESS\n", offline=True) == ""


def test_cpu_lists_read_as_taskset_does_and_bad_ones_are_named() -> None:
    assert agents.cpu_list("0") == {0}
    assert agents.cpu_list("0,2-3") == {0, 2, 3}
    for bad in ("", "a", "3-1", "1-", "-1"):
        with pytest.raises(ValueError, match="CPU list"):
            agents.cpu_list(bad)


def test_split_cpus_wants_two_disjoint_lists_of_usable_cpus() -> None:
    assert scale.split_cpus("0:1", {0, 1}) == ("0", "1")
    assert scale.split_cpus(" 0 : 1-2 ", {0, 1, 2}) == ("0", "1-2")
    for bad, why in (("0", "RM:AGENTS"), ("0:0-1", "on both sides"),
                     ("0:3", r"CPUs \[3\] are not usable")):
        with pytest.raises(ValueError, match=why):
            scale.split_cpus(bad, {0, 1})
