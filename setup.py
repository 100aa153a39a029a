# The native extension is described in geasync/_cffi_build.py (cffi API mode); everything else is in pyproject.toml.
from setuptools import setup

setup(cffi_modules=["geasync/_cffi_build.py:ffibuilder"])
