"""Experiments behind the command line's figures: library code the ``blockc``
commands print and the docs' tables come from.

- :mod:`blockc.experiments.depth`: chapter 24's stacking experiment at any depth,
  and the residual-stream norms of a random model.
- :mod:`blockc.experiments.trainability`: the trainability of pre-norm, post-norm,
  no residual, no norm and ReLU at several depths, on a Markov task.
- :mod:`blockc.experiments.gradients`: the gradient of every layer at
  initialisation (its parameters' and its input's), per variant, depth and init.
- :mod:`blockc.experiments.warmup`: final loss against peak learning rate, with
  and without warmup, pre-norm and post-norm, GELU and ReLU, with seeds.
"""
from __future__ import annotations

from . import depth, gradients, trainability, warmup

__all__ = ["depth", "gradients", "trainability", "warmup"]
