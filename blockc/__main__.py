"""``python -m blockc``: the ``blockc`` command."""
import sys

try:
    from .cli import main
except ImportError as e:  # no built extension: one line, not a traceback
    sys.stderr.write(f"blockc: error: {e}\n")
    sys.exit(1)

sys.exit(main())
