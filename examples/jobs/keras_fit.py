"""A plain Keras ``model.fit`` program, as ML teams write them: Keras' own callbacks, no
Themis import, no training loop of its own (docs/jobs.md, "Keras model.fit").

What it relies on from Themis: the log directory (``$THEMIS_LOGDIR``), where Keras'
TensorBoard callback writes the runs ``train/`` and ``validation/`` that the profiler reads
(objective ``epoch_loss``: the validation run's, one value per epoch), and a checkpoint
directory (``$THEMIS_CHECKPOINT_DIR``) that survives moves, where ``BackupAndRestore`` keeps
its backup. What it adds for Themis, two lines:

* ``epochs`` from the run's step target (``$THEMIS_MAX_STEPS``, in training steps), so a
  run trains no further than Hyperband asked;
* ``BackupAndRestore(..., delete_checkpoint=False)``: Keras deletes the backup when ``fit``
  returns, so a promoted trial would start over; kept, its next run resumes at the last
  epoch. A run stopped at a lease end dies of the SIGTERM at once (Keras installs no
  handler) and resumes at the start of the epoch it was in: Keras writes the backup at each
  epoch's end (``save_freq="epoch"``).

    python3 examples/jobs/keras_fit.py --learning-rate 0.01
"""

import argparse
import math
import os

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--learning-rate", type=float, default=0.01, help="Adam's step size")
parser.add_argument("--batch-size", type=int, default=64, help="examples per step")
args = parser.parse_args()

logdir = os.environ.get("THEMIS_LOGDIR", "logs")
backup = os.path.join(os.environ.get("THEMIS_CHECKPOINT_DIR", "ckpt"), "backup")
max_steps = int(os.environ.get("THEMIS_MAX_STEPS", 200))

# a fixed synthetic 4-class problem (the same data on every restart)
rng = np.random.default_rng(0)
centres = rng.normal(size=(4, 16)) * 0.4
labels = rng.integers(0, 4, size=2048)
features = (centres[labels] + rng.normal(size=(2048, 16))).astype("float32")

model = tf.keras.Sequential([tf.keras.Input((16,)),
                             tf.keras.layers.Dense(32, activation="relu"),
                             tf.keras.layers.Dense(4)])
model.compile(tf.keras.optimizers.Adam(args.learning_rate),
              tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
steps_per_epoch = math.ceil(len(features) * 0.9 / args.batch_size)
model.fit(features, labels, batch_size=args.batch_size, validation_split=0.1, verbose=2,
          epochs=max(1, math.ceil(max_steps / steps_per_epoch)),
          callbacks=[tf.keras.callbacks.BackupAndRestore(backup, delete_checkpoint=False),
                     tf.keras.callbacks.TensorBoard(logdir, update_freq="batch")])
