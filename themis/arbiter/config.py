"""The arbiter service's configuration (:class:`ArbiterConfig`) and its fixed limits.

The round rules the settings parametrise are the paper's: leases of ``lease_s`` re-auctioned
round by round with the fairness knob f choosing the bidders (section 3.3.2), rounds that
never stall while GPUs are free (work conservation, sections 3 and 4), the form of T_id in
rho (section 3.2, Eq. 1 and Eq. 2; section 4.3.1's approximation). The bounds on ids,
secrets, bid tables, registrations and registered apps are this implementation's, not the
paper's (docs/protocol.md, "Limits"; docs/yarn.md, "Security").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from themis.mechanism.fairness import (
    DEFAULT_IDEAL_TIME,
    DEFAULT_STARVATION,
    parse_ideal_time,
    parse_starvation,
)
from themis.mechanism.model import ModelError
from themis.mechanism.round import (
    DEFAULT_FAIRNESS_KNOB,
    RoundError,
    check_knob,
    check_spread,
    lease_spread,
)
from themis.mechanism.solvers import DEFAULT_SOLVER

MAX_APP_ID = 128
MAX_APPS_HINT = 1024  # registered apps beyond which the registration history is pruned
MAX_SECRET = 256  # characters; a longer secret is wrong without being compared
DEFAULT_MAX_APPS = 4096  # ArbiterConfig.max_apps
MAX_KEY = 1e18  # bound of a starving key's numbers (themis.safeinput.Limits.max_number)


@dataclass(frozen=True, slots=True)
class ArbiterConfig:
    lease_s: float = 600.0
    # the leases of one round last lease_s +- lease_spread_s / 2, spread over the round's
    # apps, so that they do not all end in one round (themis.mechanism.round.lease_lengths);
    # None: half of lease_s
    lease_spread_s: float | None = None
    bid_timeout_s: float = 5.0
    warning_s: float = 60.0  # lease warning this long before expiry (at most lease_s / 2)
    fairness_knob: float = DEFAULT_FAIRNESS_KNOB
    heartbeat_s: float = 5.0
    round_delay_s: float = 0.02  # coalesce triggers (e.g. a burst of registrations)
    # work conservation (paper, sections 3 and 4): every round_interval_s the round loop
    # starts a round when GPUs are free and a connected app can take more (YARN's
    # round-interval-ms, docs/yarn.md "Round trigger and free GPUs")
    round_interval_s: float = 1.0
    solver: str = DEFAULT_SOLVER
    seed: int = 0
    # the form of T_id agents use in rho, announced at registration (docs/mechanism.md)
    ideal_time: str = str(DEFAULT_IDEAL_TIME)
    # how the (1-f) filter orders apps holding no GPU (docs/mechanism.md, "Starvation"),
    # announced at registration: "served-now" uses the keys agents report with rho = +inf
    starvation: str = str(DEFAULT_STARVATION)
    # bid table bounds (docs/protocol.md, "Limits"): an agent's menu for a 4,096-GPU offer
    # has ~550 bundles and ~1.05 million GPU ids in all (themis.mechanism.bids)
    max_bundles: int = 1024
    max_table_gpu_ids: int = 1 << 21
    # per-app limit on registrations (docs/yarn.md, "Security"): at most this many accepted
    # RegisterApp calls of one app id per registration_window_s (RESOURCE_EXHAUSTED beyond)
    max_registrations: int = 10
    registration_window_s: float = 60.0
    # registered apps at once (docs/protocol.md, "Limits"): a round's work and messages grow
    # with them, so RegisterApp beyond gets RESOURCE_EXHAUSTED; registered apps are unaffected
    max_apps: int = DEFAULT_MAX_APPS

    def __post_init__(self) -> None:
        check_knob(self.fairness_knob)
        try:
            object.__setattr__(self, "ideal_time", str(parse_ideal_time(self.ideal_time)))
        except ModelError as exc:
            raise ValueError(f"arbiter config: {exc}") from None
        try:
            object.__setattr__(self, "starvation", str(parse_starvation(self.starvation)))
        except ModelError as exc:
            raise ValueError(f"arbiter config: {exc}") from None
        for name in ("lease_s", "bid_timeout_s", "heartbeat_s", "registration_window_s",
                     "round_interval_s"):
            v = getattr(self, name)
            if not math.isfinite(v) or v <= 0:
                raise ValueError(f"arbiter config: {name}={v!r} must be a positive number")
        try:
            check_spread(self.lease_s, self.spread_s)
        except RoundError as exc:
            raise ValueError(f"arbiter config: lease_spread_s: {exc}") from None
        for name in ("warning_s", "round_delay_s"):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"arbiter config: {name}={v!r} must be a number >= 0")
        for name in ("max_bundles", "max_table_gpu_ids", "max_registrations", "max_apps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"arbiter config: {name}={v!r} must be an integer >= 1")

    @property
    def spread_s(self) -> float:
        return lease_spread(self.lease_s, self.lease_spread_s)

    @property
    def effective_warning_s(self) -> float:
        return min(self.warning_s, self.lease_s / 2)
