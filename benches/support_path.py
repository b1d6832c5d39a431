"""``import support_path`` puts tests/support (the PyTorch reference, the GIL probe,
the leak cases) on sys.path: the benches share it with the tests, and the tests
never import from benches/."""
import os
import sys

SUPPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "support")
if SUPPORT not in sys.path:
    sys.path.insert(0, SUPPORT)
