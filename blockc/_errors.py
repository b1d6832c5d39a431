"""blockc's exceptions: one root, :class:`BlockcError`.

Each subclass is also the built-in exception that fits (PyNaCl's pattern), so
``except ValueError`` keeps working and ``except blockc.BlockcError`` catches
everything blockc raises on purpose.
"""
from __future__ import annotations

__all__ = ["BlockcError", "BlockcValueError", "BlockcTypeError", "BlockcMemoryError"]


class BlockcError(Exception):
    """The root of every exception blockc raises; raised itself for a C failure
    the Python layer did not anticipate."""


class BlockcValueError(BlockcError, ValueError):
    """An argument has the right type but a wrong value (a shape, a range, a key)."""


class BlockcTypeError(BlockcError, TypeError):
    """An argument has the wrong type (an int where a bool is needed, ...)."""


class BlockcMemoryError(BlockcError, MemoryError):
    """The C library could not allocate its scratch, or an array is too large."""
