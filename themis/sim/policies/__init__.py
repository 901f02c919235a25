"""Cross-app scheduling policies behind one interface (:class:`Policy`)."""

from __future__ import annotations

from collections.abc import Callable

from themis.mechanism.round import DEFAULT_FAIRNESS_KNOB
from themis.sim.errors import UnknownPolicy
from themis.sim.policies.base import Allocation, Policy, RoundContext
from themis.sim.policies.fairshare import FairSharePolicy
from themis.sim.policies.fifo import FifoPolicy
from themis.sim.policies.gandiva import GandivaPolicy
from themis.sim.policies.gavel import GavelFtfPolicy
from themis.sim.policies.hermes import HermesPolicy
from themis.sim.policies.optimus import OptimusPolicy
from themis.sim.policies.slaq import SlaqPolicy
from themis.sim.policies.srsf import SrsfPolicy
from themis.sim.policies.srtf import SrtfPolicy
from themis.sim.policies.themis import ThemisPolicy
from themis.sim.policies.tiresias import TiresiasPolicy

FACTORIES: dict[str, Callable[[float], Policy]] = {
    # Themis as deployed: the default starvation order (served-now, docs/mechanism.md)
    "themis": lambda f: ThemisPolicy(fairness_knob=f),
    # Themis with the paper's reading of the filter: apps holding no GPU tie at rho = +inf
    # and a draw decides among them (the option starvation = "inf")
    "themis-inf": lambda f: ThemisPolicy(fairness_knob=f, starvation="inf"),
    # Themis with every starving app above the apps holding GPUs, by its served-now rho
    # (the option starvation = "served-now")
    "themis-served-now": lambda f: ThemisPolicy(fairness_knob=f, starvation="served-now"),
    "gandiva": lambda f: GandivaPolicy(),
    "tiresias": lambda f: TiresiasPolicy(gittins=False),
    "tiresias-gittins": lambda f: TiresiasPolicy(gittins=True),
    "optimus": lambda f: OptimusPolicy(),
    "slaq": lambda f: SlaqPolicy(),
    "srtf": lambda f: SrtfPolicy(),
    "srsf": lambda f: SrsfPolicy(),
    "gavel": lambda f: GavelFtfPolicy(),
    "hermes": lambda f: HermesPolicy(),
    "fifo": lambda f: FifoPolicy(),
    "fairshare": lambda f: FairSharePolicy(),
}
POLICY_NAMES = tuple(FACTORIES)


def make_policy(name: str, fairness_knob: float = DEFAULT_FAIRNESS_KNOB) -> Policy:
    try:
        factory = FACTORIES[name]
    except KeyError:
        raise UnknownPolicy(
            f"unknown policy {name!r}; valid policies: {', '.join(POLICY_NAMES)}"
        ) from None
    return factory(fairness_knob)


__all__ = ["POLICY_NAMES", "Allocation", "Policy", "RoundContext", "make_policy"]
