"""SLAQ, the model-quality baseline (section 6.1): apps report the loss decrease the next
GPU would buy and GPUs go one at a time to the largest decrease. Loss curves are
1/sqrt(1 + iters/tau) per job (:func:`themis.sim.state.loss_at`, the sublinear convergence
SLAQ fits); the decrease is over one lease, with the app's GPUs spread evenly over its
running jobs. Placement-unaware."""

from __future__ import annotations

from themis.sim.policies.base import Allocation, Policy, RoundContext
from themis.sim.policies.greedy import greedy
from themis.sim.state import AppState, loss_at


def loss_gain(app: AppState, gpus: int, horizon: float) -> float:
    """Mean loss decrease over ``horizon`` seconds from the (gpus+1)-th GPU."""
    running = [j for j in app.jobs if not j.done]
    if not running:
        return 0.0
    total = 0.0
    for j in running:
        spec = app.spec.jobs[j.index]
        x = horizon / spec.serial_iter_time / len(running)
        now = j.iters_done_total
        total += loss_at(now + gpus * x, spec.tau) - loss_at(now + (gpus + 1) * x, spec.tau)
    return total / len(running)


class SlaqPolicy(Policy):
    name = "slaq"

    def allocate(self, ctx: RoundContext) -> Allocation:
        def key(app: AppState, n: int) -> tuple[float, ...]:
            return (-loss_gain(app, len(app.held) + n, ctx.lease_s),)

        return greedy(ctx, key, unit=True, placement_aware=False)
