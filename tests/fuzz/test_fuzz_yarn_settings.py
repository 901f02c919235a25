"""Fuzzing the settings the RM plugin passes to the engine process (yarn-site values as
environment variables, themis.yarn.settings): each value is refused with one
SettingError naming its variable (and yarn-site key), or accepted within its documented
range; the engine's command line refuses the same values with exit status 2."""

from __future__ import annotations

import contextlib
import io
import math
import os
from unittest import mock

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.fuzz._fuzz import HOSTILE_TEXT, fuzz_settings
from themis.yarn import engine
from themis.yarn.settings import (
    MAX_APPS,
    MAX_BID_TIMEOUT_S,
    MAX_LEASE_MS,
    PREFIX,
    VARIABLES,
    EngineSettings,
    SettingError,
    from_env,
)

PLAUSIBLE = st.sampled_from([
    "0", "1", "-1", "0.8", "0.999", "1.0", "1.0E-4", "5", "600000", "8642", "65535", "65536",
    "auto", "auto-fast", "highs", "exact", "paper", "inf", "served-now", "ranked", "EXACT", " paper ",
    "127.0.0.1", "::1", "[::1]", "rm.example.com", "tok-123", "1e400", "nan", "-0", " 5 ",
    "0x10", "\uff11\uff12", "1_000", "+7", "9" * 30, "1" * 19, "31622400000",
    "31622400001", "3600", "3600.0001",
])
VALUE = PLAUSIBLE | HOSTILE_TEXT | st.text(max_size=12)


def check(s: EngineSettings) -> None:
    assert s.gateway_port is None or 1 <= s.gateway_port <= 65535
    assert s.gateway_token is None or (s.gateway_token and s.gateway_token.isprintable())
    assert -1 <= s.agent_port <= 65535
    assert s.agent_host and s.agent_host.isprintable() and " " not in s.agent_host
    assert 0 < s.bid_timeout_s <= MAX_BID_TIMEOUT_S and math.isfinite(s.bid_timeout_s)
    assert 0 < s.lease_s <= MAX_LEASE_MS / 1000
    assert 0 <= s.fairness_knob < 1
    assert s.ideal_time in ("exact", "paper") and s.starvation in ("inf", "served-now", "ranked")
    assert s.solver and s.solver.isprintable()
    assert 1 <= s.max_apps <= MAX_APPS


@fuzz_settings(300)
@given(st.dictionaries(st.sampled_from(sorted(VARIABLES)), VALUE, max_size=4))
def test_engine_settings(env: dict[str, str]) -> None:
    try:
        s = from_env(env)
    except SettingError as exc:
        event("refused")
        msg = str(exc)
        assert "\n" not in msg
        named = [v for v in env if msg.startswith(v)]
        assert named, msg
        key = VARIABLES[named[0]][0]
        assert not key or f"{PREFIX}{key}" in msg
        return
    event("accepted")
    check(s)


@fuzz_settings(100)
@given(st.sampled_from(["THEMIS_FAIRNESS_KNOB", "THEMIS_LEASE_MS", "THEMIS_AGENT_PORT",
                        "THEMIS_STARVATION", "THEMIS_BID_TIMEOUT_S", "THEMIS_AGENT_HOST"]),
       VALUE)
def test_engine_command_refuses_bad_settings(variable: str, value: str) -> None:
    """The engine's main: a refused value is one line on stderr and exit status 2, before
    anything starts (no gateway token: an accepted value stops at 'need the gateway')."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("THEMIS_")}
    try:  # what a real environment can hold (undecodable bytes come as \udc80-\udcff)
        value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "replace").decode()
    value = value.replace("\x00", "")
    env[variable] = value
    err = io.StringIO()
    with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stderr(err):
        rc = engine.main(["--port", "1"])
    assert rc == 2
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("themis.yarn.engine: "), lines
    assert "Traceback" not in err.getvalue()


@pytest.mark.parametrize(("value", "want"), [(None, "ranked"), ("inf", "inf"),
                                             (" INF ", "inf"), ("Served-Now", "served-now"),
                                             ("RANKED", "ranked")])
def test_starvation_default_and_every_option(value: str | None, want: str) -> None:
    """Unset: the default, served-now; ``ranked`` and ``inf`` (the paper's reading) are
    read as set."""
    env = {} if value is None else {"THEMIS_STARVATION": value}
    assert from_env(env).starvation == want
    assert VARIABLES["THEMIS_STARVATION"][:2] == ("starvation", "ranked")


@pytest.mark.parametrize("argv", [["--lease-s", "nan"], ["--agent-port", "70000"],
                                  ["--bid-timeout-s", "-1"], ["--port", "x"]])
def test_engine_options_are_bounded_too(argv: list[str]) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        engine.main(argv)
    assert exit_.value.code == 2 and "Traceback" not in err.getvalue()
