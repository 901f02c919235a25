"""The Keras model, its optimizer and the TensorFlow checkpoint of both.

Imports TensorFlow: only the training job process loads this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keras
import numpy as np
import numpy.typing as npt
import tensorflow as tf

OPTIMIZERS = ("adam", "sgd", "rmsprop", "adagrad")
CKPT_PREFIX = "ckpt"


@dataclass(frozen=True, slots=True)
class ModelConfig:
    num_features: int
    num_classes: int
    hidden_units: int = 64
    num_layers: int = 2
    dropout: float = 0.0
    optimizer: str = "adam"
    learning_rate: float = 1e-3
    momentum: float = 0.0
    seed: int = 0


def build_optimizer(cfg: ModelConfig) -> keras.optimizers.Optimizer:
    if cfg.optimizer == "adam":
        return keras.optimizers.Adam(learning_rate=cfg.learning_rate)
    if cfg.optimizer == "sgd":
        return keras.optimizers.SGD(learning_rate=cfg.learning_rate, momentum=cfg.momentum)
    if cfg.optimizer == "rmsprop":
        return keras.optimizers.RMSprop(learning_rate=cfg.learning_rate, momentum=cfg.momentum)
    if cfg.optimizer == "adagrad":
        return keras.optimizers.Adagrad(learning_rate=cfg.learning_rate)
    raise ValueError(f"unknown optimizer {cfg.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")


class Trainer:
    """A multi-layer perceptron classifier trained with a compiled ``tf.function`` step.

    The checkpoint holds the model, the optimizer (iteration counter and slots) and the
    global step."""

    def __init__(self, cfg: ModelConfig) -> None:
        keras.utils.set_random_seed(cfg.seed)
        layers: list[Any] = [keras.Input((cfg.num_features,))]
        for _ in range(cfg.num_layers):
            layers.append(keras.layers.Dense(cfg.hidden_units, activation="relu"))
            if cfg.dropout > 0:
                layers.append(keras.layers.Dropout(cfg.dropout))
        layers.append(keras.layers.Dense(cfg.num_classes))
        self.model = keras.Sequential(layers)
        self.optimizer = build_optimizer(cfg)
        self.optimizer.build(self.model.trainable_variables)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.checkpoint = tf.train.Checkpoint(
            model=self.model, optimizer=self.optimizer, step=self.step
        )
        self._initial = [v.numpy() for v in self._all_variables()]
        self._train_step = tf.function(self._train_step_impl, reduce_retracing=True)

    def _all_variables(self) -> list[Any]:
        return [*self.model.variables, *self.optimizer.variables, self.step]

    def _loss(self, y: Any, logits: Any) -> Any:
        return tf.reduce_mean(
            keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        )

    def _train_step_impl(self, x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = self._loss(y, self.model(x, training=True))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables, strict=True))
        self.step.assign_add(1)
        return loss

    def train_step(self, x: npt.NDArray[np.float32], y: npt.NDArray[np.int32]) -> float:
        """One SGD step; returns the mini-batch loss (synchronises with the device)."""
        return float(self._train_step(tf.constant(x), tf.constant(y)))

    def evaluate(
        self, x: npt.NDArray[np.float32], y: npt.NDArray[np.int32]
    ) -> tuple[float, float]:
        logits = self.model(tf.constant(x), training=False)
        loss = float(self._loss(tf.constant(y), logits))
        acc = float(np.mean(np.argmax(np.asarray(logits), axis=1) == y))
        return loss, acc

    @property
    def global_step(self) -> int:
        return int(self.step.numpy())

    def write(self, directory: Path) -> None:
        self.checkpoint.write(str(directory / CKPT_PREFIX))

    def read(self, directory: Path, expected_step: int) -> None:
        """Restore every variable from ``directory`` (raises if anything is missing)."""
        self.checkpoint.read(str(directory / CKPT_PREFIX)).assert_consumed()
        if self.global_step != expected_step:
            raise ValueError(
                f"checkpoint step variable is {self.global_step}, its name says {expected_step}"
            )

    def reset(self) -> None:
        """Return every variable to its initial value (after a failed partial restore)."""
        for var, value in zip(self._all_variables(), self._initial, strict=True):
            var.assign(value)

    def optimizer_state(self) -> dict[str, npt.NDArray[Any]]:
        """Optimizer variables by path (iteration counter, learning rate, slots)."""
        return {v.path: np.asarray(v.numpy()) for v in self.optimizer.variables}
