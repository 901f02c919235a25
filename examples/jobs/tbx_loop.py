"""A PyTorch-style training loop that writes its scalars with ``tensorboardX`` (the event
format of PyTorch's ``torch.utils.tensorboard.SummaryWriter``), as ML teams write them:
no Themis import (docs/jobs.md, "PyTorch").

The model is multinomial logistic regression on scikit-learn's 8x8 digits, trained with
SGD with momentum in numpy, so that the example runs without PyTorch; with PyTorch the loop
is the same, with ``torch.save``/``torch.load`` for the checkpoint. What it does for Themis
is what any job must (docs/jobs.md, "What a job must do"):

1. Resume: at start, load model, optimizer state and step from the newest ``ckpt-<step>``
   in ``$THEMIS_CHECKPOINT_DIR`` (the name gives the AM the step it resumed from).
2. Train until ``$THEMIS_MAX_STEPS`` (the global step, counted across restarts), writing
   ``Loss/train`` every step and ``Loss/val``, ``Accuracy/val`` every ``--eval-every`` steps
   with ``SummaryWriter.add_scalar(tag, value, global_step)`` in the run ``run/`` of
   ``$THEMIS_LOGDIR`` (objective ``Loss/val``: examples/jobs/tbx-hyperband.yaml).
3. SIGTERM: finish the current step, checkpoint, exit 0; checkpoint at the end too.

    python3 examples/jobs/tbx_loop.py --learning-rate 0.1
"""

import argparse
import os
import re
import signal
import time

# 3. SIGTERM only sets a flag (set first: a stop may come while the libraries load): the
# loop checkpoints and exits after the current step
stop = False


def on_sigterm(signum, frame):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_sigterm)

import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from tensorboardX import SummaryWriter  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--learning-rate", type=float, default=0.1, help="SGD's step size")
parser.add_argument("--momentum", type=float, default=0.9, help="SGD's momentum")
parser.add_argument("--batch-size", type=int, default=64, help="examples per step")
parser.add_argument("--eval-every", type=int, default=10, help="steps between evaluations")
parser.add_argument("--step-sleep-s", type=float, default=0.01,
                    help="seconds of sleep per step, standing in for a real model's compute")
args = parser.parse_args()

max_steps = int(os.environ.get("THEMIS_MAX_STEPS", 200))
ckpt_dir = os.environ.get("THEMIS_CHECKPOINT_DIR", "ckpt")
logdir = os.environ.get("THEMIS_LOGDIR", "logs")

# the data: the same split on every restart
digits = load_digits()
x = (digits.data / 16.0).astype("float64")
y = digits.target
order = np.random.default_rng(0).permutation(len(x))
train, val = order[:1437], order[1437:]


def save(step, params, velocity):
    """``ckpt-<step>``, written under a temporary name and renamed; older ones removed."""
    os.makedirs(ckpt_dir, exist_ok=True)
    tmp = os.path.join(ckpt_dir, f"ckpt-{step}.partial")
    with open(tmp, "wb") as f:
        np.savez(f, step=step, **params, **{f"v_{k}": v for k, v in velocity.items()})
    os.replace(tmp, os.path.join(ckpt_dir, f"ckpt-{step}"))
    for name in os.listdir(ckpt_dir):
        m = re.fullmatch(r"ckpt-(\d+)", name)
        if m and int(m[1]) != step:
            os.remove(os.path.join(ckpt_dir, name))


def restore():
    """(step, params, velocity) of the newest checkpoint, else a fresh model at step 0."""
    steps = [int(m[1]) for name in (os.listdir(ckpt_dir) if os.path.isdir(ckpt_dir) else ())
             if (m := re.fullmatch(r"ckpt-(\d+)", name))]
    if not steps:
        params = {"w": np.zeros((64, 10)), "b": np.zeros(10)}
        return 0, params, {k: np.zeros_like(v) for k, v in params.items()}
    with np.load(os.path.join(ckpt_dir, f"ckpt-{max(steps)}")) as z:
        return (int(z["step"]), {k: z[k] for k in ("w", "b")},
                {k: z[f"v_{k}"] for k in ("w", "b")})


def forward(params, idx):
    """Mean cross-entropy, accuracy and the logits' gradient on the examples ``idx``."""
    logits = x[idx] @ params["w"] + params["b"]
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    loss = -np.log(p[np.arange(len(idx)), y[idx]] + 1e-12).mean()
    acc = (p.argmax(axis=1) == y[idx]).mean()
    p[np.arange(len(idx)), y[idx]] -= 1.0
    return float(loss), float(acc), p / len(idx)


# 1. resume
step, params, velocity = restore()
print(f"starting at step {step} of {max_steps}", flush=True)
writer = SummaryWriter(os.path.join(logdir, "run"), flush_secs=1)

# 2. train to the step target
while step < max_steps and not stop:
    batch = np.random.default_rng(step).choice(train, args.batch_size, replace=False)
    loss, _, grad = forward(params, batch)
    grads = {"w": x[batch].T @ grad, "b": grad.sum(axis=0)}
    for k in params:
        velocity[k] = args.momentum * velocity[k] - args.learning_rate * grads[k]
        params[k] = params[k] + velocity[k]
    step += 1
    writer.add_scalar("Loss/train", loss, step)
    if step % args.eval_every == 0 or step == max_steps:
        val_loss, val_acc, _ = forward(params, val)
        writer.add_scalar("Loss/val", val_loss, step)
        writer.add_scalar("Accuracy/val", val_acc, step)
        writer.flush()
    time.sleep(args.step_sleep_s)

save(step, params, velocity)
writer.close()
print(f"{'stopped' if stop else 'done'} at step {step}, checkpoint written", flush=True)
