# setuptools needs cffi_modules here; everything else lives in pyproject.toml.
from setuptools import setup

setup(cffi_modules=["build_ffi.py:ffibuilder"])
