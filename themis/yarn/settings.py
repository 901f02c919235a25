"""The settings the RM plugin passes to the engine process (``python -m themis.yarn.engine``)
in its environment, parsed totally.

The plugin reads yarn-site.xml (Java ``ThemisSettings``, which refuses bad values first)
and exports the values below; the engine, which can also be started by hand, checks them
again: each bad value is one :class:`SettingError` naming the environment variable, the
yarn-site key it comes from and the value, and the engine exits with status 2 before it
starts anything. A variable that is unset takes the default; one that is set but empty
is an error.

=====================  ==============================================  ================
variable               yarn-site key (yarn.resourcemanager.themis.*)   accepted
=====================  ==============================================  ================
THEMIS_GATEWAY_PORT    (the plugin's Py4J gateway)                     1-65535
THEMIS_GATEWAY_TOKEN   (the plugin's Py4J gateway)                     1-1024 printable
THEMIS_AGENT_PORT      agent-port                                      -1 (no agents) -
                                                                       65535 (0: any)
THEMIS_AGENT_HOST      - (the agents' endpoint's bind address)         a host name or IP
THEMIS_BID_TIMEOUT_S   -                                               (0, 3600] s
THEMIS_MAX_APPS        max-apps (registered apps at once; 4096)        1 - 1000000
THEMIS_LEASE_MS        lease-duration-ms                               1 ms - 366 days
THEMIS_FAIRNESS_KNOB   fairness-knob                                   [0, 1)
THEMIS_SOLVER          solver                                          a solver name
THEMIS_IDEAL_TIME      ideal-time                                      exact, paper
THEMIS_STARVATION      starvation                                      served-now, ranked, inf
=====================  ==============================================  ================
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from themis.mechanism.fairness import (
    DEFAULT_IDEAL_TIME,
    DEFAULT_STARVATION,
    parse_ideal_time,
    parse_starvation,
)
from themis.mechanism.model import ModelError
from themis.mechanism.round import DEFAULT_FAIRNESS_KNOB
from themis.mechanism.solvers import DEFAULT_SOLVER
from themis.safeinput import short

T = TypeVar("T")
PREFIX = "yarn.resourcemanager.themis."
MAX_VALUE = 1024  # characters of any value
MAX_LEASE_MS = 366 * 86400 * 1000
MAX_BID_TIMEOUT_S = 3600.0
MAX_APPS = 1_000_000  # largest accepted THEMIS_MAX_APPS
_HOST = re.compile(r"[A-Za-z0-9_.:\[\]%-]{1,253}")  # names, IPv4, IPv6 (maybe bracketed)
_INT = re.compile(r"[+-]?[0-9]{1,19}")  # no underscores, no other digits than 0-9
_NAME = re.compile(r"[A-Za-z0-9_.+:-]{1,64}")


class SettingError(ValueError):
    """A setting's value is refused (names the variable, the yarn-site key, the value)."""


def _integer(text: str, lo: int, hi: int) -> int:
    if not _INT.fullmatch(text.strip()):
        raise ValueError(f"must be an integer in [{lo}, {hi}]")
    v = int(text.strip())
    if not lo <= v <= hi:
        raise ValueError(f"must be an integer in [{lo}, {hi}]")
    return v


def _number(text: str, lo: float, hi: float, *, lo_open: bool, hi_open: bool) -> float:
    interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
    try:
        v = float(text.strip()) if len(text) <= 64 else math.nan
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or (v <= lo if lo_open else v < lo) or (v >= hi if hi_open
                                                                     else v > hi):
        raise ValueError(f"must be a number in {interval}")
    return v


def _port(text: str) -> int:
    return _integer(text, 1, 65535)


def _agent_port(text: str) -> int:
    return _integer(text, -1, 65535)


def _token(text: str) -> str:
    if not text.isprintable() or text.strip() != text:
        raise ValueError("must be printable characters without surrounding blanks")
    return text


def _host(text: str) -> str:
    if not _HOST.fullmatch(text):
        raise ValueError("must be a host name or an IP address")
    return text


def _bid_timeout(text: str) -> float:
    return _number(text, 0.0, MAX_BID_TIMEOUT_S, lo_open=True, hi_open=False)


def _max_apps(text: str) -> int:
    return _integer(text, 1, MAX_APPS)


def _lease_ms(text: str) -> int:
    return _integer(text, 1, MAX_LEASE_MS)


def _knob(text: str) -> float:
    return _number(text, 0.0, 1.0, lo_open=False, hi_open=True)


def _solver(text: str) -> str:
    if not _NAME.fullmatch(text.strip()):
        raise ValueError("must be a solver name (letters, digits, '-', '_', '.', '+', ':')")
    return text.strip()


def _choice(parse: Callable[[str], Any]) -> Callable[[str], str]:
    def check(text: str) -> str:
        try:
            return str(parse(text.strip().lower()))
        except ModelError as exc:
            raise ValueError(str(exc)) from None
    return check


#: variable -> (yarn-site key without the prefix, or "" for the plugin's own; default; parse)
VARIABLES: dict[str, tuple[str, str, Callable[[str], Any]]] = {
    "THEMIS_GATEWAY_PORT": ("", "", _port),
    "THEMIS_GATEWAY_TOKEN": ("", "", _token),
    "THEMIS_AGENT_PORT": ("agent-port", "-1", _agent_port),
    "THEMIS_AGENT_HOST": ("", "127.0.0.1", _host),
    "THEMIS_BID_TIMEOUT_S": ("", "5", _bid_timeout),
    # = themis.arbiter.config.DEFAULT_MAX_APPS (not imported: it pulls in the solvers)
    "THEMIS_MAX_APPS": ("max-apps", "4096", _max_apps),
    "THEMIS_LEASE_MS": ("lease-duration-ms", "600000", _lease_ms),
    "THEMIS_FAIRNESS_KNOB": ("fairness-knob", str(DEFAULT_FAIRNESS_KNOB), _knob),
    "THEMIS_SOLVER": ("solver", DEFAULT_SOLVER, _solver),
    "THEMIS_IDEAL_TIME": ("ideal-time", str(DEFAULT_IDEAL_TIME), _choice(parse_ideal_time)),
    "THEMIS_STARVATION": ("starvation", str(DEFAULT_STARVATION), _choice(parse_starvation)),
}


def parse_value(variable: str, text: str) -> Any:
    """``text`` as the value of ``variable``; :class:`SettingError` naming both."""
    key, _, parse = VARIABLES[variable]
    source = f"{variable} ({PREFIX}{key})" if key else variable
    if len(text) > MAX_VALUE:
        raise SettingError(f"{source}: a value of {len(text)} characters (at most "
                           f"{MAX_VALUE})")
    if not text.strip():
        raise SettingError(f"{source}: empty value")
    try:
        return parse(text)
    except ValueError as exc:
        raise SettingError(f"{source} = {short(text)}: {exc}") from None


@dataclass(frozen=True, slots=True)
class EngineSettings:
    gateway_port: int | None  # None: not set (the engine then needs --port)
    gateway_token: str | None
    agent_port: int
    agent_host: str
    bid_timeout_s: float
    max_apps: int
    lease_s: float
    fairness_knob: float
    solver: str
    ideal_time: str
    starvation: str


def from_env(environ: Mapping[str, str]) -> EngineSettings:
    """The engine's settings from ``environ`` (defaults for unset variables)."""
    v: dict[str, Any] = {}
    for name, (_, default, _) in VARIABLES.items():
        text = environ.get(name)
        v[name] = (None if not default else parse_value(name, default)) if text is None \
            else parse_value(name, text)
    return EngineSettings(
        gateway_port=v["THEMIS_GATEWAY_PORT"], gateway_token=v["THEMIS_GATEWAY_TOKEN"],
        agent_port=v["THEMIS_AGENT_PORT"], agent_host=v["THEMIS_AGENT_HOST"],
        bid_timeout_s=v["THEMIS_BID_TIMEOUT_S"], max_apps=v["THEMIS_MAX_APPS"],
        lease_s=v["THEMIS_LEASE_MS"] / 1000.0,
        fairness_knob=v["THEMIS_FAIRNESS_KNOB"], solver=v["THEMIS_SOLVER"],
        ideal_time=v["THEMIS_IDEAL_TIME"], starvation=v["THEMIS_STARVATION"])


def arg_type(variable: str) -> Callable[[str], Any]:
    """An argparse ``type=`` that parses a command-line value as ``variable``'s (argparse
    reports the error and exits with status 2)."""
    def parse(text: str) -> Any:
        try:
            return parse_value(variable, text)
        except SettingError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


def lease_seconds(text: str) -> float:
    """argparse ``type=`` of ``--lease-s``: a number of seconds in (0, 366 days]."""
    try:
        return _number(text, 0.0, MAX_LEASE_MS / 1000, lo_open=True, hi_open=False)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--lease-s {short(text)}: {exc}") from None
