"""Hyper-parameter search spaces: doubles, integers (linear or log scale), categoricals.

Sampling is driven by a caller-supplied :class:`random.Random`, so a seeded app draws the
same configurations every time.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Value = float | int | str


class SearchSpaceError(ValueError):
    """A parameter definition is invalid (names the parameter and the problem)."""


@dataclass(frozen=True, slots=True)
class Double:
    name: str
    low: float
    high: float
    log: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low <= self.high):
            raise SearchSpaceError(f"{self.name}: need finite low <= high, got "
                                   f"[{self.low}, {self.high}]")
        if self.log and self.low <= 0:
            raise SearchSpaceError(f"{self.name}: log scale needs low > 0, got {self.low}")

    def sample(self, rng: random.Random) -> float:
        if self.log:
            return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return rng.uniform(self.low, self.high)


@dataclass(frozen=True, slots=True)
class Int:
    name: str
    low: int
    high: int
    log: bool = False

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise SearchSpaceError(f"{self.name}: need low <= high, got [{self.low}, {self.high}]")
        if self.log and self.low <= 0:
            raise SearchSpaceError(f"{self.name}: log scale needs low > 0, got {self.low}")

    def sample(self, rng: random.Random) -> int:
        if self.log:
            # uniform in log space over [low - 0.5, high + 0.5), rounded: every integer
            # in range is reachable and small values are favoured
            lo = math.log(self.low - 0.5 if self.low > 1 else self.low)
            hi = math.log(self.high + 0.5)
            return min(self.high, max(self.low, round(math.exp(rng.uniform(lo, hi)))))
        return rng.randint(self.low, self.high)


@dataclass(frozen=True, slots=True)
class Categorical:
    name: str
    choices: tuple[Value, ...]

    def __post_init__(self) -> None:
        if not self.choices:
            raise SearchSpaceError(f"{self.name}: a categorical needs at least one choice")

    def sample(self, rng: random.Random) -> Value:
        return self.choices[rng.randrange(len(self.choices))]


Param = Double | Int | Categorical


class SearchSpace:
    """An ordered set of parameters; :meth:`sample` draws one configuration."""

    def __init__(self, params: Sequence[Param]) -> None:
        names = [p.name for p in params]
        if len(set(names)) != len(names):
            raise SearchSpaceError(f"duplicate parameter names in {names}")
        if not params:
            raise SearchSpaceError("a search space needs at least one parameter")
        self.params = tuple(params)

    def sample(self, rng: random.Random) -> dict[str, Value]:
        return {p.name: p.sample(rng) for p in self.params}

    @classmethod
    def from_dict(cls, spec: Mapping[str, Mapping[str, Any]]) -> SearchSpace:
        """From e.g. ``{"learning_rate": {"type": "double", "min": 1e-4, "max": 1e-1,
        "scale": "log"}, "optimizer": {"type": "categorical", "values": ["adam", "sgd"]}}``."""
        params: list[Param] = []
        for name, p in spec.items():
            kind = str(p.get("type", "")).lower()
            scale = str(p.get("scale", "linear")).lower()
            if scale not in ("linear", "log"):
                raise SearchSpaceError(f"{name}: scale must be 'linear' or 'log', got {scale!r}")
            try:
                if kind == "double":
                    params.append(Double(name, float(p["min"]), float(p["max"]), scale == "log"))
                elif kind == "int":
                    params.append(Int(name, int(p["min"]), int(p["max"]), scale == "log"))
                elif kind == "categorical":
                    params.append(Categorical(name, tuple(p["values"])))
                else:
                    raise SearchSpaceError(
                        f"{name}: type must be double, int or categorical, got {kind!r}"
                    )
            except KeyError as e:
                raise SearchSpaceError(f"{name}: missing field {e.args[0]!r}") from None
        return cls(params)
