# setuptools needs cffi_modules here; everything else lives in pyproject.toml.
# The extension uses only CPython's limited API (cffi builds it abi3), so the
# wheel is tagged cp39-abi3: one wheel serves every CPython >= 3.9.
from setuptools import setup

setup(cffi_modules=["build_ffi.py:ffibuilder"],
      options={"bdist_wheel": {"py_limited_api": "cp39"}})
