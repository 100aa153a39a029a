"""``Tensor``: a host or device tensor with numpy interop.

A Tensor is backed by one of three owners: a numpy array (host, zero-copy), a runtime output (host or device memory
owned by the shim, freed when the Tensor and every numpy view of it are gone), or device memory geasync allocated
(``to_device``). Wherever an input Tensor is accepted, a numpy array is accepted too.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from . import _lib

__all__ = ["Tensor"]


class Tensor:
    """A tensor for GE runs. Build with :meth:`from_numpy` (or pass numpy arrays directly to runs)."""

    __slots__ = ("_array", "_owner", "_address", "_nbytes", "_shape", "_dtype", "_placement", "__weakref__")

    def __init__(self) -> None:
        raise TypeError("use Tensor.from_numpy(array) (or pass a numpy array directly)")

    @classmethod
    def _make(cls, *, array: np.ndarray | None, owner: Any, address: int, nbytes: int, shape: tuple[int, ...],
              dtype: np.dtype, placement: str) -> "Tensor":
        t = object.__new__(cls)
        t._array = array
        t._owner = owner
        t._address = address
        t._nbytes = nbytes
        t._shape = shape
        t._dtype = dtype
        t._placement = placement
        return t

    @classmethod
    def from_numpy(cls, array: Any) -> "Tensor":
        """A host tensor over ``array`` (no copy when it is C-contiguous, else a contiguous copy)."""
        if isinstance(array, Tensor):
            return array
        arr = np.asarray(array)
        _lib.ge_dtype(arr.dtype)  # TypeError for dtypes GE cannot take
        if arr.ndim > _lib.MAX_DIMS:
            raise ValueError(f"GE tensors have at most {_lib.MAX_DIMS} dims, got {arr.ndim}")
        if not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        return cls._make(array=arr, owner=None, address=0, nbytes=arr.nbytes, shape=tuple(arr.shape),
                         dtype=arr.dtype, placement="host")

    @classmethod
    def _from_native(cls, nt: "_lib.NativeTensor") -> "Tensor":
        placement = "device" if nt.placement == _lib.PLACEMENT_DEVICE else "host"
        dtype = _lib.np_dtype(nt.ge_dtype)
        array = nt.host_view() if placement == "host" else None
        return cls._make(array=array, owner=nt.owner, address=nt.address, nbytes=nt.nbytes, shape=nt.shape,
                         dtype=dtype, placement=placement)

    # --- properties ---
    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def placement(self) -> str:
        """``"host"`` or ``"device"``."""
        return self._placement

    @property
    def nbytes(self) -> int:
        return int(np.prod(self._shape, dtype=np.int64)) * self._dtype.itemsize

    @property
    def address(self) -> int:
        """Address of the data (device address for device tensors)."""
        if self._array is not None:
            return self._array.ctypes.data
        return self._address

    def numpy(self) -> np.ndarray:
        """The data as a numpy array: a zero-copy view, valid while it lives. Device tensors: use to_host()."""
        if self._placement != "host":
            raise ValueError("this Tensor lives in device memory; call .to_host() first (after the stream that "
                             "produced it is synchronized)")
        assert self._array is not None
        return self._array

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self.numpy()
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            return arr.astype(dtype)
        return arr.copy() if copy else arr

    def to_device(self, device_id: int = -1) -> "Tensor":
        """A copy in device memory (aclrtMalloc + aclrtMemcpy host->device)."""
        nbytes = self.nbytes
        owner = _lib.device_buffer(nbytes, device_id, "Tensor.to_device()")
        if self._placement == "host":
            src = _lib.buffer_pointer(self.numpy())
            _lib.memcpy(owner, max(1, nbytes), src, nbytes, _lib.MEMCPY_HOST_TO_DEVICE, "Tensor.to_device()")
        else:
            _lib.memcpy(owner, max(1, nbytes), _lib.pointer(self._address), nbytes, _lib.MEMCPY_DEVICE_TO_DEVICE,
                        "Tensor.to_device()")
        return Tensor._make(array=None, owner=owner, address=_lib.address_of(owner), nbytes=nbytes,
                            shape=self._shape, dtype=self._dtype, placement="device")

    def to_host(self) -> "Tensor":
        """A host copy (aclrtMemcpy device->host); host tensors return themselves."""
        if self._placement == "host":
            return self
        arr = np.empty(self._shape, dtype=self._dtype)
        _lib.memcpy(_lib.buffer_pointer(arr), arr.nbytes, _lib.pointer(self._address), arr.nbytes,
                    _lib.MEMCPY_DEVICE_TO_HOST, "Tensor.to_host()")
        return Tensor.from_numpy(arr)

    def __repr__(self) -> str:
        return f"Tensor(shape={self._shape}, dtype={self._dtype}, placement={self._placement!r})"

    # --- for the runtime ---
    def _desc_row(self, keep: list[Any]) -> tuple[Any, int, int, int, tuple[int, ...]]:
        if self._placement == "host":
            assert self._array is not None
            data = _lib.buffer_pointer(self._array)
            keep.append(data)
            keep.append(self._array)
            return data, self._array.nbytes, _lib.ge_dtype(self._dtype), _lib.PLACEMENT_HOST, self._shape
        keep.append(self._owner)
        return _lib.pointer(self._address), self._nbytes, _lib.ge_dtype(self._dtype), _lib.PLACEMENT_DEVICE, self._shape


def as_tensor(value: Any, *, what: str) -> Tensor:
    """A Tensor from a Tensor or a numpy array; TypeError for anything else (seed 002: inputs must be Tensors)."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        return Tensor.from_numpy(value)
    raise TypeError(f"{what} must be a geasync.Tensor or a numpy.ndarray, got {type(value).__name__}")


def input_descs(inputs: Sequence[Tensor]) -> "_lib.InputDescs":
    keep: list[Any] = []
    rows = [t._desc_row(keep) for t in inputs]
    return _lib.InputDescs(rows, keep)
