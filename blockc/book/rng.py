"""Portable C-runtime ``rand()`` generators, in pure Python.

The chapter's figures come from the Microsoft C runtime's ``rand()``; compiled
on Linux the same listings use glibc's. blockc never calls the platform
``rand()``: it carries both generators, here and in C (``csrc/rng.c``), so the
figures come out the same on every platform.

- ``msvc``:  ``state = state * 214013 + 2531011 (mod 2**32)``,
  ``rand() = (state >> 16) & 0x7fff``, ``RAND_MAX = 32767``.
- ``glibc``: the TYPE_3 additive feedback generator, ``RAND_MAX = 2**31 - 1``.
"""
from __future__ import annotations

import numpy as np

from .._args import as_choice, as_int, as_seed

__all__ = ["CRand", "GENERATORS", "generator_id"]

GENERATORS = ("msvc", "glibc")
_M32 = 0xFFFFFFFF


def generator_id(rand: str) -> int:
    """The C constant (0 msvc, 1 glibc) for a generator name; ValueError otherwise."""
    return GENERATORS.index(as_choice(rand, "rand", GENERATORS))


class CRand:
    """``srand(seed)`` then ``rand()``, as the named C runtime computes them."""

    def __init__(self, seed: int = 1, rand: str = "msvc"):
        generator_id(rand)
        seed = as_seed(seed)
        self.kind = rand
        self.rand_max = 32767 if rand == "msvc" else 2147483647
        self._lcg = seed
        if rand == "glibc":
            word = seed or 1
            if word >= 2**31:
                word -= 2**32  # the state is a signed 32-bit int
            tab = [word & _M32]
            for _ in range(30):
                hi = abs(word) // 127773 * (1 if word >= 0 else -1)  # C division truncates
                lo = word - hi * 127773
                word = 16807 * lo - 2836 * hi
                if word < 0:
                    word += 2147483647
                tab.append(word & _M32)
            self._tab, self._front, self._rear = tab, 3, 0
            for _ in range(310):
                self.rand()

    def rand(self) -> int:
        """The next value of ``rand()``.

        Returns
        -------
        int
            In [0, RAND_MAX].

        Examples
        --------
        >>> CRand(42, "msvc").rand()
        175
        """
        if self.kind == "msvc":
            self._lcg = (self._lcg * 214013 + 2531011) & _M32
            return (self._lcg >> 16) & 0x7FFF
        t, f, r = self._tab, self._front, self._rear
        t[f] = (t[f] + t[r]) & _M32
        self._front, self._rear = (f + 1) % 31, (r + 1) % 31
        return t[f] >> 1

    def rands(self, n: int) -> np.ndarray:
        """The next ``n`` values of ``rand()``.

        Parameters
        ----------
        n : int >= 0

        Returns
        -------
        numpy.ndarray
            (n,) uint32.

        Raises
        ------
        TypeError
            A non-integer ``n``.
        ValueError
            A negative ``n``.

        Examples
        --------
        >>> CRand(1, "glibc").rands(3)
        array([1804289383,  846930886, 1681692777], dtype=uint32)
        """
        n = as_int(n, "n", 0)
        return np.array([self.rand() for _ in range(n)], dtype=np.uint32)

    def uniform(self, n: int, scale: float = 0.1) -> np.ndarray:
        """The listings' weight draw ``(randf() * 2 - 1) * scale``,
        ``randf() = (float)rand() / RAND_MAX``, every step rounded to float32.

        Parameters
        ----------
        n : int >= 0
        scale : float, optional

        Returns
        -------
        numpy.ndarray
            (n,) float32.

        Raises
        ------
        TypeError
            A non-integer ``n``.
        ValueError
            A negative ``n``.

        Examples
        --------
        >>> CRand(42).uniform(2)
        array([-0.09893186, -0.09755852], dtype=float32)
        """
        r = self.rands(n).astype(np.float32) / np.float32(self.rand_max)
        return (r * np.float32(2) - np.float32(1)) * np.float32(scale)
