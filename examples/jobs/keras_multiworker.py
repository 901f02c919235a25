"""A distributed Keras training program (MultiWorkerMirroredStrategy) that follows the Themis
job contract for distributed jobs (docs/jobs.md, "Distributed jobs").

It imports nothing from Themis. Every worker runs this same program; TensorFlow reads the
cluster and the worker's task from ``$TF_CONFIG``, which Themis sets for every task. Worker
0 is the chief.

1. Resume: every worker restores model + optimizer + step from the chief's newest
   checkpoint in the checkpoint directory, if there is one.
2. Train until ``--max-steps`` (the global step, counted across restarts); the chief writes
   ``loss`` and ``eval_loss`` to TensorFlow event files in ``--logdir``.
3. SIGTERM: Themis sends it to every worker. The workers agree on stopping after the same
   step (an all-reduce of their stop flags each step: one that stopped alone would leave
   the others waiting in the next step's all-reduce), checkpoint (the chief to the
   checkpoint directory, the others to a temporary one, as TensorFlow's multi-worker
   guides do) and exit 0.

Options fall back to ``$THEMIS_MAX_STEPS``, ``$THEMIS_CHECKPOINT_DIR``, ``$THEMIS_LOGDIR``:

    python3 examples/jobs/keras_multiworker.py --learning-rate 0.05
"""

import argparse
import json
import os
import signal
import tempfile

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--max-steps", type=int, default=int(os.environ.get("THEMIS_MAX_STEPS", 200)),
                    help="train until this global step (default $THEMIS_MAX_STEPS, else 200)")
parser.add_argument("--checkpoint-dir", default=os.environ.get("THEMIS_CHECKPOINT_DIR", "ckpt"),
                    help="the chief's checkpoint directory (default $THEMIS_CHECKPOINT_DIR)")
parser.add_argument("--logdir", default=os.environ.get("THEMIS_LOGDIR", "logs"),
                    help="the chief's event files (default $THEMIS_LOGDIR, else logs)")
parser.add_argument("--learning-rate", type=float, default=0.05, help="SGD's step size")
parser.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints")
args = parser.parse_args()

stop = False


def on_sigterm(signum, frame):
    global stop
    stop = True


task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
chief = task.get("index", 0) == 0
strategy = tf.distribute.MultiWorkerMirroredStrategy()
# after the strategy: its start-up installs a SIGTERM handler of its own
signal.signal(signal.SIGTERM, on_sigterm)
print(f"worker {task.get('index', 0)}: {strategy.num_replicas_in_sync} replicas in sync",
      flush=True)

# Data: a fixed synthetic 4-class problem; each worker draws its own batches.
rng = np.random.default_rng(0)
centres = rng.normal(size=(4, 16)) * 2.0
labels = rng.integers(0, 4, size=2048)
features = (centres[labels] + rng.normal(size=(2048, 16))).astype("float32")
x_train, y_train, x_eval, y_eval = features[:1792], labels[:1792], features[1792:], labels[1792:]

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((16,)),
                                 tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(4)])
    optimizer = tf.keras.optimizers.SGD(args.learning_rate)
step = tf.Variable(0, dtype=tf.int64)  # the global step (the same on every worker)
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


@tf.function
def train_step(x, y, flag):
    """One synchronous step; returns the mean loss and how many workers want to stop."""

    def replica(x, y, flag):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)),
                                              global_batch_size=32 * strategy.num_replicas_in_sync)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss, flag

    loss, flags = strategy.run(replica, args=(x, y, flag))
    return (strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None),
            strategy.reduce(tf.distribute.ReduceOp.SUM, flags, axis=None))


# 1. Resume from the chief's newest checkpoint (every worker).
checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
own_dir = args.checkpoint_dir if chief else tempfile.mkdtemp()
manager = tf.train.CheckpointManager(checkpoint, own_dir, max_to_keep=2)
latest = tf.train.latest_checkpoint(args.checkpoint_dir)
if latest:
    checkpoint.restore(latest)
    print(f"restored {latest} at step {int(step.numpy())}", flush=True)


def save():
    # every worker saves (the variables are synchronised); only the chief's copy is kept
    manager.save(checkpoint_number=int(step.numpy()))


# 2. Train; the chief writes the event files.
writer = (tf.summary.create_file_writer(args.logdir) if chief
          else tf.summary.create_noop_writer())
batches = np.random.default_rng(int(step.numpy()) * 2 + task.get("index", 0))
s = int(step.numpy())
with writer.as_default():
    while s < args.max_steps:
        idx = batches.integers(0, len(x_train), size=32)
        loss, stopping = train_step(tf.constant(x_train[idx]), tf.constant(y_train[idx]),
                                    tf.constant(1.0 if stop else 0.0))
        step.assign_add(1)
        s = int(step.numpy())
        tf.summary.scalar("loss", float(loss), step=s)
        if s % 10 == 0:
            eval_loss = tf.reduce_mean(loss_fn(y_eval, model(x_eval, training=False)))
            tf.summary.scalar("eval_loss", float(eval_loss), step=s)
        writer.flush()
        if float(stopping) > 0:  # 3. some worker got SIGTERM: all stop after this step
            break
        if s % args.checkpoint_every == 0:
            save()
save()  # at --max-steps, or after SIGTERM
print(f"{'stopped' if s < args.max_steps else 'done'} at step {s}", flush=True)
