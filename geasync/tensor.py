"""``Tensor``: a host or device tensor with numpy interop.

A Tensor is backed by one of three owners: a numpy array (host, zero-copy; also a small host output, copied out of
the runtime as its run returned), a runtime output (host or device memory owned by the shim, freed when the Tensor
and every numpy view of it are gone), or device memory geasync allocated (``to_device``). Wherever an input Tensor
is accepted, a numpy array is accepted too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Mapping

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

from . import _dtypes, _lib
from ._inputs import run_context, unknown_graph_feeds_error

__all__ = ["Tensor"]

DEVICE_ALIGNMENT = 32  # GE checks device input addresses against this


def _dims(shape: Any) -> tuple[int, ...]:
    """``shape`` as a tuple of ints; TypeError for anything else. int() took 1.5 as 1 and iterated "12" as (1, 2):
    a device tensor of another size than its memory, silently."""
    bad = isinstance(shape, (str, bytes)) or not isinstance(shape, (Sequence, np.ndarray))
    if not bad:
        dims = tuple(shape)
        bad = not all(isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_)) for d in dims)
    if bad:
        raise TypeError(f"Tensor.from_device: shape must be a sequence of ints (e.g. (2, 784)), got {shape!r}")
    return tuple(int(d) for d in dims)


class Tensor:
    """A tensor for GE runs. Build with :meth:`from_numpy` (or pass numpy arrays directly to runs)."""

    # _owner: None for numpy-backed tensors; for runtime outputs the cdata that owns the ga_tensor; for device
    # memory geasync or the user allocated, whatever keeps it alive
    __slots__ = ("_array", "_owner", "_output", "_address", "_nbytes", "_shape", "_dtype", "_placement",
                 "__weakref__")
    _array: NDArray[Any] | None  # numpy-backed: the array; a host output: its view, made on first use
    _owner: Any
    _output: bool  # a runtime output
    _address: int
    _nbytes: int
    _shape: tuple[int, ...]
    _dtype: np.dtype[Any]
    _placement: str

    def __init__(self) -> None:
        raise TypeError("use Tensor.from_numpy(array) (or pass a numpy array directly)")

    @classmethod
    def _make(cls, *, array: NDArray[Any] | None, owner: Any, address: int, nbytes: int, shape: tuple[int, ...],
              dtype: np.dtype[Any], placement: str) -> "Tensor":
        t = object.__new__(cls)
        t._array = array
        t._output = False
        t._owner = owner
        t._address = address
        t._nbytes = nbytes
        t._shape = shape
        t._dtype = dtype
        t._placement = placement
        return t

    @classmethod
    def from_numpy(cls, array: "Tensor | ArrayLike") -> "Tensor":
        """A host tensor over ``array`` (no copy when it is a C-contiguous numpy array in this machine's byte order,
        else a contiguous copy in it)."""
        if isinstance(array, Tensor):
            return array
        arr = np.asarray(array)
        if not arr.dtype.isnative:  # e.g. ">f4" read from a file: GE takes only the machine's own byte order
            native = arr.dtype.newbyteorder("=")
            if native in _lib._NP_TO_GE:
                arr = arr.astype(native)
        _lib.ge_dtype(arr.dtype)  # TypeError for dtypes GE cannot take
        if arr.ndim > _lib.MAX_DIMS:
            raise ValueError(f"GE tensors have at most {_lib.MAX_DIMS} dims, got {arr.ndim}")
        if not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        return cls._make(array=arr, owner=None, address=0, nbytes=arr.nbytes, shape=tuple(arr.shape),
                         dtype=arr.dtype, placement="host")

    @classmethod
    def from_device(cls, address: int, shape: Sequence[int], dtype: DTypeLike, *, owner: object = None) -> "Tensor":
        """A device tensor over memory you allocated (e.g. with aclrtMalloc): geasync does not free it.

        GE requires device inputs to be 32-byte aligned: an unaligned address is refused here, before the runtime
        sees it. ``owner`` is kept alive as long as the Tensor (and any run using it).
        """
        if not isinstance(address, int) or isinstance(address, bool) or address <= 0:
            raise TypeError(f"address must be a positive int (a device address), got {address!r}")
        if address % DEVICE_ALIGNMENT:
            raise ValueError(f"device address 0x{address:x} is not {DEVICE_ALIGNMENT}-byte aligned: GE requires "
                             f"device inputs to be {DEVICE_ALIGNMENT}-byte aligned (aclrtMalloc and "
                             "Tensor.to_device() return aligned memory)")
        shape = _dims(shape)
        if any(d < 0 for d in shape) or len(shape) > _lib.MAX_DIMS:
            raise ValueError(f"shape must have at most {_lib.MAX_DIMS} non-negative dims, got {shape}")
        dt = np.dtype(dtype)
        _lib.ge_dtype(dt)
        nbytes = math.prod(shape) * dt.itemsize  # exact (an int64 product wraps: 2^64 elements made 0 bytes)
        if nbytes > 2**63:
            raise ValueError(f"Tensor.from_device: shape {shape} of {dt} is {nbytes} bytes, more than any device "
                             "memory; check the shape")
        return cls._make(array=None, owner=owner, address=address, nbytes=nbytes, shape=shape, dtype=dt,
                         placement="device")

    @classmethod
    def _from_output(cls, owner: Any, address: int, nbytes: int, ge_dtype: int, placement: int,
                     shape: tuple[int, ...]) -> "Tensor":
        """A runtime output (the output factory of ``_lib``). On every run's hot path: the fields are set
        directly, and a host output's numpy view is made on first use."""
        dtype = _GE_TO_NP.get(ge_dtype)
        if dtype is None:
            dtype = _lib.np_dtype(ge_dtype)  # raises: numpy has no such dtype
        t = object.__new__(cls)
        t._array = None
        t._output = True
        t._owner = owner
        t._address = address
        t._nbytes = nbytes
        t._shape = shape
        t._dtype = dtype
        t._placement = "host" if placement == _lib.PLACEMENT_HOST else "device"
        return t

    def _host_array(self) -> NDArray[Any] | None:
        if self._array is None and self._output and self._placement == "host":
            self._array = _lib.host_view(self._owner, self._address, self._nbytes, self._dtype, self._shape)
        return self._array

    # --- properties ---
    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._dtype

    @property
    def placement(self) -> str:
        """``"host"`` or ``"device"``."""
        return self._placement

    @property
    def nbytes(self) -> int:
        return self._nbytes

    @property
    def address(self) -> int:
        """Address of the data (device address for device tensors)."""
        if not self._output and self._array is not None:
            return int(self._array.ctypes.data)
        return self._address

    def numpy(self) -> NDArray[Any]:
        """The data as a numpy array: a zero-copy view, valid while it lives. Device tensors: use to_host()."""
        arr = self._array  # numpy-backed, copied out of the runtime, or viewed before
        if arr is not None:
            return arr
        if self._placement != "host":
            raise ValueError("this Tensor lives in device memory; call .to_host() first (after the stream that "
                             "produced it is synchronized)")
        arr = self._host_array()
        assert arr is not None
        return arr

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> NDArray[Any]:
        arr = self.numpy()
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            if copy is False:  # numpy 2's protocol: copy=False must never copy, so a conversion is an error
                raise ValueError(f"Tensor.__array__: cannot view this {arr.dtype} Tensor as {np.dtype(dtype)} "
                                 "without a copy (copy=False); pass copy=None to allow one")
            return arr.astype(dtype)
        return arr.copy() if copy else arr

    def to_device(self, device_id: int = -1) -> "Tensor":
        """A copy in device memory (aclrtMalloc + aclrtMemcpy host->device)."""
        if not isinstance(device_id, int) or isinstance(device_id, bool) or device_id < -1:
            raise ValueError(f"Tensor.to_device(): device_id must be a device number >= 0, or -1 for the default "
                             f"device, got {device_id!r}")
        nbytes = self.nbytes
        _lib.ensure_initialized()
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

    def __copy__(self) -> "Tensor":
        # the same memory, kept alive by the same owner (as the array view of a host tensor would be)
        t = Tensor._make(array=self._array, owner=self._owner, address=self._address, nbytes=self._nbytes,
                         shape=self._shape, dtype=self._dtype, placement=self._placement)
        t._output = self._output
        return t

    def __reduce__(self) -> Any:
        # pickle and deepcopy: a host tensor as its values (a runtime output's memory does not cross processes); a
        # device one has no values in host memory to give
        if self._placement != "host":
            raise TypeError("a device Tensor cannot be pickled or deep-copied: its memory belongs to this process's "
                            "runtime; use tensor.to_host() first (after synchronizing the stream that wrote it)")
        return (Tensor.from_numpy, (self.numpy(),))



_GE_DTYPES = _lib._NP_TO_GE
_GE_TO_NP = _lib._GE_TO_NP
_MAX_DIMS = _lib.MAX_DIMS

# how runs hand their outputs to this layer (see geasync._lib.OutputFactory)
def _host_copy(array: NDArray[Any], nbytes: int, shape: tuple[int, ...], dtype: np.dtype[Any],
               new: Callable[[type[Tensor]], Tensor] = object.__new__, cls: type[Tensor] = Tensor) -> Tensor:
    """A small host output copied into ``array`` (the output factory's ``copy``): a numpy-backed Tensor. Once per
    output of every run: a plain function (a classmethod's binding costs ~0.1 us) given what the caller knows."""
    t = new(cls)
    t._array = array
    t._output = False
    t._owner = None
    t._address = 0
    t._nbytes = nbytes
    t._shape = shape
    t._dtype = dtype
    t._placement = "host"
    return t


TENSORS: "_lib.OutputFactory[Tensor]" = _lib.OutputFactory(Tensor._from_output, _host_copy)

PreparedInputs = _lib.PreparedInputs  # a run's inputs as native descriptors, with what keeps them alive


def prepare_inputs(inputs: Any, what: str = "inputs", *, require_list: bool = False, spec: Any = None,
                   api: str = "run_graph", graph_id: int = -1) -> PreparedInputs:
    """Checks a run's inputs (Tensors or numpy arrays; TypeError for anything else, as GE's Python package
    does for non-Tensors) and builds their descriptors. C-contiguous arrays of GE dtypes are used in place.

    ``spec`` (a ``geasync._inputs.GraphSpec``): the graph's declared inputs. With it, a ``{name: array}`` mapping is
    taken too (unless ``require_list``), and each input is checked against the declaration (InputError, naming
    ``api``). On the hot path that costs a comparison and a set lookup per input."""
    return PreparedInputs(*input_rows(inputs, what, require_list, spec, api, graph_id))


InputRow = _lib.InputRow  # (data, nbytes, ge dtype, placement, ndim, shape)


def input_rows(inputs: Any, what: str, require_list: bool, spec: Any, api: str,
               graph_id: int) -> tuple[list[InputRow], list[Any] | None, tuple[NDArray[Any], ...], int]:
    """prepare_inputs' check, without the descriptor array: (rows, keep, arrays, nbytes) as PreparedInputs takes
    them. A synchronous run describes its rows in a per-thread buffer instead (``_lib.run_graph``); the caller
    keeps ``keep`` alive until the run returns."""
    if require_list and type(inputs) is not list:
        raise TypeError(f"{run_context(api, graph_id)}: {what} must be a list, got {type(inputs).__name__}" +
                        (" (GE's contract for this API; turn a {name: array} mapping into the list with "
                         "session.input_list(graph_id, feeds))" if isinstance(inputs, Mapping) else ""))
    if type(inputs) is not list and not isinstance(inputs, (list, tuple)):  # a list first: the usual case
        if type(inputs) is dict or isinstance(inputs, Mapping):  # dict first: the ABC check costs more
            if spec is None:
                raise unknown_graph_feeds_error(graph_id, api)
            inputs = spec.order(inputs, api)
        elif isinstance(inputs, Sequence) and not isinstance(inputs, (str, bytes, bytearray)):
            inputs = list(inputs)  # any other sequence (what the type hints say runs take)
        else:
            raise TypeError(f"{run_context(api, graph_id)}: {what} must be a list of Tensor (or a {{name: Tensor}} "
                            f"mapping), got {type(inputs).__name__}")
    if spec is not None:
        if len(inputs) != spec.count:
            raise spec.count_error(len(inputs), api)
        want_dtypes = spec.want_dtypes
        usual_shapes = spec.usual_shapes
        ok_shapes = spec.ok_shapes
    rows: list[InputRow] = []
    keep: list[Any] | None = None  # Tensor inputs and their memory's owners (numpy inputs are kept by `arrays`)
    arrays: list[NDArray[Any]] = []
    nbytes = 0
    from_buffer = _lib.from_buffer
    for i, x in enumerate(inputs):
        if type(x) is np.ndarray:
            dt = _GE_DTYPES.get(x.dtype)
            if dt is not None and x.ndim <= _MAX_DIMS:
                shape = x.shape
                if spec is not None and (dt != want_dtypes[i] or
                                         (shape != usual_shapes[i] and shape not in ok_shapes[i])):
                    spec.check(i, dt, shape, api)
                try:
                    buf = from_buffer(x)  # refuses non-contiguous arrays: those take the copying path
                except (BufferError, ValueError, TypeError):
                    buf = None
                if buf is not None:
                    arrays.append(x)
                    n = x.nbytes
                    rows.append((buf, n, dt, _lib.PLACEMENT_HOST, x.ndim, shape))
                    nbytes += n
                    continue
        if isinstance(x, np.ndarray):
            try:  # copies non-contiguous and byte-swapped arrays
                x = Tensor.from_numpy(x)
            except (TypeError, ValueError) as exc:  # a dtype GE lacks, too many dims: say which input of which call
                raise _unusable_input(exc, x, i, what, spec, api, graph_id) from None
        elif not isinstance(x, Tensor):
            raise _not_an_array(x, i, what, spec, api, graph_id)
        if keep is None:
            keep = []
        dt = _lib.ge_dtype(x._dtype)
        if spec is not None and (dt != want_dtypes[i] or
                                 (x._shape != usual_shapes[i] and x._shape not in ok_shapes[i])):
            spec.check(i, dt, x._shape, api)
        if x._placement == "host":
            arr = x._host_array()
            assert arr is not None
            buf = from_buffer(arr, require_writable=False)
            arrays.append(arr)
            rows.append((buf, arr.nbytes, dt, _lib.PLACEMENT_HOST, arr.ndim, arr.shape))
        else:
            keep.append(x._owner)
            rows.append((_lib.pointer(x._address), x._nbytes, dt, _lib.PLACEMENT_DEVICE, len(x._shape), x._shape))
        keep.append(x)
        nbytes += x._nbytes
    # a tuple of arrays (not GC-tracked) stops being traversed by the collector once it has seen it
    return rows, keep, tuple(arrays), nbytes


def _not_an_array(x: Any, i: int, what: str, spec: Any, api: str, graph_id: int) -> TypeError:
    """The TypeError for an input that is neither a Tensor nor an array, naming the call, the graph and the input."""
    name = f" ({spec.names[i]!r})" if spec is not None and i < spec.count else ""
    want = spec.inputs[i].dtype if spec is not None and i < spec.count else None
    convert = f"np.asarray(value, dtype={_dtypes.dtype_name(want)})" if want is not None else "np.asarray(value)"
    return TypeError(f"{run_context(api, graph_id)}: {what}[{i}]{name} must be a geasync.Tensor or a numpy.ndarray, "
                     f"got {type(x).__name__} (pass {convert})")


def _unusable_input(exc: Exception, x: NDArray[Any], i: int, what: str, spec: Any, api: str,
                    graph_id: int) -> Exception:
    """``exc`` (from Tensor.from_numpy) as the same exception type, naming the run API, the graph and the input."""
    name = f" ({spec.names[i]!r})" if spec is not None and i < spec.count else ""
    where = f"Session.{api}(graph_id={graph_id}): {what}[{i}]{name}"
    hint = ""
    if isinstance(exc, TypeError):
        want = spec.inputs[i].dtype if spec is not None and i < spec.count else None
        hint = (f" (convert it: array.astype({_dtypes.dtype_name(want)}))" if want is not None else
                " (convert it to one of those: array.astype(...))")
    return type(exc)(f"{where}: {exc}{hint}")
