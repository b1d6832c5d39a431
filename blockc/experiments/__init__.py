"""Experiments behind the command line's figures: library code the ``blockc``
commands print and the docs' tables come from.

- :mod:`blockc.experiments.depth`: chapter 24's stacking experiment at any depth,
  and the residual-stream norms of a random model.
- :mod:`blockc.experiments.trainability`: the trainability of pre-norm, post-norm,
  no residual, no norm and ReLU at several depths, on a Markov task.
"""
from __future__ import annotations

from . import depth, trainability

__all__ = ["depth", "trainability"]
