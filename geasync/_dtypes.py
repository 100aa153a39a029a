"""dtypes numpy itself lacks: bfloat16 is ml_dtypes' (ml_dtypes comes with onnx), looked up on first need so that
importing geasync does not import ml_dtypes. Shared by the ONNX declarations (_metadata) and the ffi layer (_lib)."""

from __future__ import annotations

import functools
from typing import Optional

import numpy as np

__all__ = ["bfloat16", "dtype_name"]


@functools.cache
def bfloat16() -> Optional[np.dtype]:
    """numpy's dtype for bfloat16, which ml_dtypes registers (it comes with onnx), or None without ml_dtypes.
    Looked up on first need, so importing geasync does not import ml_dtypes."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    dtype: np.dtype = np.dtype(ml_dtypes.bfloat16)
    return dtype


def dtype_name(dtype: Optional[np.dtype]) -> str:
    """How to spell ``dtype`` in code (for error messages): np.float32, ml_dtypes.bfloat16."""
    return f"ml_dtypes.{dtype}" if dtype is not None and dtype.name == "bfloat16" else f"np.{dtype}"
