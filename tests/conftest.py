"""Shared test set-up: ``tests/support`` (helpers, the PyTorch reference, the leak
cases, the GIL probe) is importable from every test module, and from the benches,
which add it to their path the same way. Tests never import from benches/."""
import os
import sys

SUPPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "support")
if SUPPORT not in sys.path:
    sys.path.insert(0, SUPPORT)
