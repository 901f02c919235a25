"""Errors raised by the arbiter on bad input. Each message names the app, bid and problem."""


class InvalidBid(ValueError):
    """A bid table is malformed: unknown/duplicate GPU, GPU not offered, bad rho, ..."""

    def __init__(self, app_id: str, problem: str, bid_index: int | None = None) -> None:
        where = f"app {app_id!r}" + (f", bid #{bid_index}" if bid_index is not None else "")
        super().__init__(f"{where}: {problem}")
        self.app_id = app_id
        self.bid_index = bid_index
        self.problem = problem


class InvalidOffer(ValueError):
    """The set of GPUs up for auction is malformed (empty/duplicate ids)."""
