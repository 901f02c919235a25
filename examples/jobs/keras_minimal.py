"""A minimal Keras training program that follows the Themis job contract (docs/jobs.md).

It imports nothing from Themis: it is written the way a user would write any job that
must survive being moved between GPUs.

1. Resume: on start, restore model + optimizer + step from the newest checkpoint in the
   checkpoint directory, if there is one.
2. Train until ``--max-steps`` (the global step, counted across restarts), writing the
   objective's tag (``loss`` every step, ``eval_accuracy`` every ``--eval-every`` steps) to
   TensorFlow event files in ``--logdir``.
3. SIGTERM: finish the current step, checkpoint, exit 0 (well within the grace period).

Every option falls back to the variable Themis sets for every job run (``$THEMIS_MAX_STEPS``,
``$THEMIS_CHECKPOINT_DIR``, ``$THEMIS_LOGDIR``), so the command needs no placeholders:

    python3 examples/jobs/keras_minimal.py --learning-rate 0.01
"""

import argparse
import os
import signal

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--max-steps", type=int, default=int(os.environ.get("THEMIS_MAX_STEPS", 200)),
                    help="train until this global step (default $THEMIS_MAX_STEPS, else 200)")
parser.add_argument("--checkpoint-dir", default=os.environ.get("THEMIS_CHECKPOINT_DIR", "ckpt"),
                    help="local checkpoint directory (default $THEMIS_CHECKPOINT_DIR, else ckpt)")
parser.add_argument("--logdir", default=os.environ.get("THEMIS_LOGDIR", "logs"),
                    help="TensorFlow event files (default $THEMIS_LOGDIR, else logs)")
parser.add_argument("--learning-rate", type=float, default=0.01, help="Adam's step size")
parser.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints")
parser.add_argument("--eval-every", type=int, default=10, help="steps between evaluations")
args = parser.parse_args()

# 3. SIGTERM only sets a flag: the loop checkpoints and exits after the current step.
stop = False


def on_sigterm(signum, frame):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_sigterm)

# Data: a fixed synthetic 4-class problem (the same on every restart).
rng = np.random.default_rng(0)
centres = rng.normal(size=(4, 16)) * 2.0
labels = rng.integers(0, 4, size=2048)
features = (centres[labels] + rng.normal(size=(2048, 16))).astype("float32")
x_train, y_train, x_eval, y_eval = features[:1792], labels[:1792], features[1792:], labels[1792:]

model = tf.keras.Sequential([tf.keras.Input((16,)),
                             tf.keras.layers.Dense(32, activation="relu"),
                             tf.keras.layers.Dense(4)])
optimizer = tf.keras.optimizers.Adam(args.learning_rate)
model.compile(optimizer=optimizer,
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])

# 1. Resume from the newest checkpoint (model, optimizer state and the global step).
step = tf.Variable(0, dtype=tf.int64)
checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
manager = tf.train.CheckpointManager(checkpoint, args.checkpoint_dir, max_to_keep=2)
if manager.latest_checkpoint:
    checkpoint.restore(manager.latest_checkpoint)
    print(f"restored {manager.latest_checkpoint} at step {int(step.numpy())}", flush=True)


def save():
    # checkpoint_number=step names the files ckpt-<step>.*: Themis reads the step from them
    manager.save(checkpoint_number=int(step.numpy()))


# 2. Train, writing the objective's tags to event files.
writer = tf.summary.create_file_writer(args.logdir)
batches = np.random.default_rng(int(step.numpy()))
with writer.as_default():
    while int(step.numpy()) < args.max_steps and not stop:
        idx = batches.integers(0, len(x_train), size=32)
        loss, _ = model.train_on_batch(x_train[idx], y_train[idx])
        step.assign_add(1)
        s = int(step.numpy())
        tf.summary.scalar("loss", float(loss), step=s)
        if s % args.eval_every == 0:
            _, accuracy = model.evaluate(x_eval, y_eval, verbose=0)
            tf.summary.scalar("eval_accuracy", float(accuracy), step=s)
        if s % args.checkpoint_every == 0:
            save()
        writer.flush()
save()  # at --max-steps, or after SIGTERM
writer.close()
print(f"{'stopped' if stop else 'done'} at step {int(step.numpy())}", flush=True)
