"""The only module that touches ``ffi`` / ``lib`` of the native extension.

Everything above it (Session, Graph, Tensor, Stream, Allocator) calls the small functions here, which check each
status with one helper (``_check``) that turns it into a :class:`~geasync.errors.GeError` carrying GE's message,
read on the calling thread right after the failure (GE's error text is per thread, read-and-clear).
cffi releases the GIL on every ``lib`` call, so blocking calls here never stall other Python threads.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import importlib.util
import math
import os
import threading
from types import TracebackType
from typing import Any, Callable, Generic, Mapping, Sequence, TypeVar

import numpy as np

from . import _dtypes, _version
from ._preload import preload
from .errors import FAILED, GeError

# The native extension in use: one per process (GE allows one runtime instance per process). Set by
# select_backend() on first use; every function below calls through these two names.
ffi: Any = None
lib: Any = None
BACKEND: str | None = None
_BACKEND_MODULES = {"twin": "geasync._twin", "cann": "geasync._cann"}
_select_lock = threading.RLock()


def backends() -> list[str]:
    """The backends this install has (``"cann"`` only if it was built against a CANN toolkit)."""
    return [name for name, module in _BACKEND_MODULES.items() if importlib.util.find_spec(module) is not None]


def select_backend(requested: str | None = None) -> str:
    """Loads the backend for this process: ``requested``, else $GEASYNC_BACKEND, else "auto" (CANN if built)."""
    global ffi, lib, BACKEND
    name = requested or os.environ.get("GEASYNC_BACKEND") or "auto"
    if name not in ("auto", "twin", "cann"):
        raise ValueError(f"backend must be 'auto', 'twin' or 'cann', got {name!r}")
    with _select_lock:
        if BACKEND is not None:
            if name in ("auto", BACKEND):
                return BACKEND
            raise RuntimeError(f"this process already runs geasync on the {BACKEND!r} backend; GE allows one runtime "
                               f"per process, so {name!r} cannot be used here. Use a separate process for it.")
        available = backends()
        if name == "auto":
            name = "cann" if "cann" in available else "twin"
        if name not in available:
            raise RuntimeError(
                f"geasync was built without the {name!r} backend (this install has: {', '.join(available) or 'none'}). "
                "To build the CANN backend: install the CANN toolkit, `source <toolkit>/set_env.sh` (or set "
                "GEASYNC_CANN_HOME), then rebuild geasync: pip install --force-reinstall --no-deps --no-cache-dir . "
                "and check with: python -m geasync info")
        preload()
        module = importlib.import_module(_BACKEND_MODULES[name])
        _check_version(module, name)
        _register_callbacks(module.ffi)
        ffi, lib = module.ffi, module.lib
        _bind_abi_constants(lib)
        _bind_hot_calls(ffi, lib)
        BACKEND = ffi.string(lib.ga_backend_name()).decode()
        return BACKEND


def current_backend() -> str:
    """The native backend of this process ("twin" or "cann"), loaded on first use."""
    return select_backend(None)


def _check_version(module: Any, name: str) -> None:
    """An extension built for another geasync version (a stale in-place build, a half-upgraded install) would
    misread every struct whose layout changed: refuse it with what to do."""
    built = module.ffi.string(module.lib.ga_version()).decode()
    if built != _version.__version__:
        raise ImportError(
            f"geasync {_version.__version__} found its native extension {_BACKEND_MODULES[name]} built for geasync "
            f"{built}: rebuild or reinstall geasync (pip install --force-reinstall --no-deps --no-cache-dir . from "
            "a source checkout, or pip install --force-reinstall geasync)")


# Constants that cross the C ABI: the C header's enums, read from the extension (so they exist once).
_ABI_CONSTANTS = {
    "PLACEMENT_DEVICE": "GA_PLACEMENT_DEVICE",
    "PLACEMENT_HOST": "GA_PLACEMENT_HOST",
    "MEMCPY_HOST_TO_DEVICE": "GA_MEMCPY_HOST_TO_DEVICE",
    "MEMCPY_DEVICE_TO_HOST": "GA_MEMCPY_DEVICE_TO_HOST",
    "MEMCPY_DEVICE_TO_DEVICE": "GA_MEMCPY_DEVICE_TO_DEVICE",
    "COMPLETION_ABANDONED": "GA_COMPLETION_ABANDONED",
    "COMPLETION_REFUSED": "GA_COMPLETION_REFUSED",
}
PLACEMENT_DEVICE: int
PLACEMENT_HOST: int
MEMCPY_HOST_TO_DEVICE: int
MEMCPY_DEVICE_TO_HOST: int
MEMCPY_DEVICE_TO_DEVICE: int
COMPLETION_ABANDONED: int
COMPLETION_REFUSED: int


def _bind_abi_constants(native_lib: Any) -> None:
    for name, c_name in _ABI_CONSTANTS.items():
        globals()[name] = int(getattr(native_lib, c_name))


# What a synchronous run calls, bound once the backend is loaded (only code holding a live handle uses them): an
# attribute of the cffi lib costs ~0.1 us a lookup, as much as a small native call.
_run_graph_call: Any = None
_release_infos_call: Any = None
_unpack: Any = None
_memmove: Any = None
_new: Any = None
_desc_array: Any = None  # the ctype "ga_tensor_desc[]", resolved once (not parsed from its name on every run)


def _bind_hot_calls(native_ffi: Any, native_lib: Any) -> None:
    global _run_graph_call, _release_infos_call, _unpack, _memmove, _new, _desc_array
    globals()["from_buffer"] = native_ffi.from_buffer  # see from_buffer()
    _run_graph_call, _release_infos_call = native_lib.ga_session_run_graph, native_lib.ga_output_infos_release
    _unpack, _memmove = native_ffi.unpack, native_ffi.memmove
    _new, _desc_array = native_ffi.new, native_ffi.typeof("ga_tensor_desc[]")


def __getattr__(name: str) -> int:
    """An ABI constant asked for before the extension was loaded: load it (they are read from it)."""
    if name in _ABI_CONSTANTS:
        select_backend(None)
        return int(globals()[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# numpy dtype <-> ge::DataType
_NP_TO_GE: dict[np.dtype, int] = {
    np.dtype(np.float32): 0,
    np.dtype(np.float16): 1,
    np.dtype(np.int8): 2,
    np.dtype(np.int32): 3,
    np.dtype(np.uint8): 4,
    np.dtype(np.int16): 6,
    np.dtype(np.uint16): 7,
    np.dtype(np.uint32): 8,
    np.dtype(np.int64): 9,
    np.dtype(np.uint64): 10,
    np.dtype(np.float64): 11,
    np.dtype(np.bool_): 12,
}
_GE_TO_NP: dict[int, np.dtype] = {v: k for k, v in _NP_TO_GE.items()}
DT_BF16 = 27  # numpy has no bfloat16: ml_dtypes' joins both maps on first need (see _bfloat16)
MAX_DIMS = 25


def _bfloat16() -> np.dtype | None:
    dt = _dtypes.bfloat16()
    if dt is not None:
        _NP_TO_GE.setdefault(dt, DT_BF16)
        _GE_TO_NP.setdefault(DT_BF16, dt)
    return dt


def ge_dtype(dtype: Any) -> int:
    """ge::DataType of a numpy dtype; TypeError for dtypes GE has no equivalent of."""
    dt = np.dtype(dtype)
    try:
        return _NP_TO_GE[dt]
    except KeyError:
        if dt.name == "bfloat16" and dt == _bfloat16():
            return DT_BF16
        supported = ", ".join(sorted(str(d) for d in _NP_TO_GE if d.name != "bfloat16"))
        raise TypeError(f"dtype {dt} has no GE equivalent; supported: {supported}, and bfloat16 as "
                        "ml_dtypes.bfloat16") from None


def np_dtype(ge_type: int) -> np.dtype:
    try:
        return _GE_TO_NP[ge_type]
    except KeyError:
        if ge_type == DT_BF16:
            dt = _bfloat16()
            if dt is not None:
                return dt
            raise GeError(FAILED, "the runtime returned a bfloat16 tensor, which numpy cannot represent without "
                          "ml_dtypes: pip install ml_dtypes (or Cast the graph's output to float32)",
                          "geasync") from None
        raise GeError(FAILED, f"the runtime returned a tensor of ge::DataType {ge_type}, which numpy "
                      "cannot represent", "geasync") from None


# --- errors ------------------------------------------------------------------------------------------------

def _last_error(api: str) -> tuple[str, str]:
    message = ffi.string(lib.ga_last_error()).decode("utf-8", "replace")
    native_api = ffi.string(lib.ga_last_api()).decode("utf-8", "replace")
    return message, native_api or api


def _check(status: int, api: str, context: str = "") -> None:
    """The one place where a status code becomes an exception."""
    if status != 0:
        message, native_api = _last_error(api)
        raise GeError(status, message, native_api, context)


# --- runtime lifetime ------------------------------------------------------------------------------------

_init_lock = threading.Lock()
_initialized = False
_init_pid = -1
generation = 0  # incremented by finalize(): sessions of an earlier generation are finalised by GE


# True in a child forked after initialisation (GE/ACL threads do not survive fork(); check_process says what to do).
# Read on every async run.
forked = False


def _after_fork_in_child() -> None:
    global forked
    forked = _initialized


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def same_process() -> bool:
    return not _initialized or _init_pid == os.getpid()


def check_process(context: str) -> None:
    """A forked child cannot use the runtime its parent initialised (GE/ACL threads do not survive fork)."""
    if forked and _init_pid != os.getpid():
        raise GeError(FAILED, f"geasync's runtime was initialised in process {_init_pid} and this process "
                      f"({os.getpid()}) is a fork of it: GE and ACL worker threads do not survive fork(). Use the "
                      "'spawn' or 'forkserver' start method (multiprocessing.get_context('spawn')), or create "
                      "everything after the fork in a process that never used geasync before forking.",
                      "fork", context)


def ensure_initialized(options: Mapping[str, str] | None = None, backend: str | None = None) -> None:
    """Selects the backend and runs GEInitializeV2 once per process, lazily; GEFinalizeV2 at interpreter exit."""
    global _initialized, _init_pid
    if _initialized and _init_pid == os.getpid():
        if backend is not None:
            select_backend(backend)  # raises if a different backend was asked for
        return
    select_backend(backend)
    check_process("geasync runtime initialisation")
    with _init_lock:
        if _initialized and _init_pid == os.getpid():
            return
        opts, keep = _options(options or {})
        _check(lib.ga_initialize(opts), "GEInitializeV2", "geasync runtime initialisation")
        _initialized = True
        _init_pid = os.getpid()


def finalize() -> None:
    """GEFinalizeV2: every live session becomes unusable; pending RunGraphAsync jobs are reported abandoned."""
    global _initialized, generation
    with _init_lock:
        if not _initialized:
            return
        _initialized = False
        generation += 1
        _check(lib.ga_finalize(), "GEFinalizeV2", "geasync.finalize()")


@atexit.register
def _finalize_at_exit() -> None:
    if _initialized and _init_pid == os.getpid():
        try:
            finalize()
        except GeError:
            pass  # nothing useful to do with a failure while the interpreter exits


def native_live_counters() -> dict[str, int]:
    """Live native objects (shim handles, and on the twin its own objects), as the native side counts them now
    (``geasync.live_counters`` settles delivered completions first)."""
    select_backend(None)
    c = ffi.new("ga_live_counters *")
    lib.ga_get_live_counters(c)
    out = {name: int(getattr(c, name)) for name, _ in ffi.typeof("ga_live_counters").fields}
    if BACKEND == "twin":
        t = ffi.new("geasync_twin_counters *")
        lib.geasync_twin_live_counters(t)
        out.update({f"twin_{name}": int(getattr(t, name)) for name, _ in ffi.typeof("geasync_twin_counters").fields})
    return out


# --- helpers -------------------------------------------------------------------------------------------------

def _options(options: Mapping[str, str]) -> tuple[Any, list[Any]]:
    """A ga_options struct over C strings; the returned list keeps them alive for the call."""
    keep: list[Any] = []
    keys = [ffi.new("char[]", str(k).encode()) for k in options]
    values = [ffi.new("char[]", str(v).encode()) for v in options.values()]
    ckeys = ffi.new("const char *[]", keys) if keys else ffi.NULL
    cvalues = ffi.new("const char *[]", values) if values else ffi.NULL
    opts = ffi.new("ga_options *", {"keys": ckeys, "values": cvalues, "count": len(keys)})
    keep += [keys, values, ckeys, cvalues]
    return opts, keep


def address_of(cdata: Any) -> int:
    return int(ffi.cast("uintptr_t", cdata))


def pointer(address: int) -> Any:
    return ffi.cast("void *", address)


InputRow = tuple[Any, int, int, int, int, tuple[int, ...]]  # (data, nbytes, ge dtype, placement, ndim, shape)


class PreparedInputs:
    """ga_tensor_desc[] for a run (``array``, ``count``), built from (data, nbytes, ge dtype, placement, ndim, shape)
    rows, with what keeps the described memory alive while the runtime reads it: ``arrays``, the host numpy arrays
    among the inputs (the lifetime guard may also freeze them), and ``keep``, anything else (Tensor inputs and the
    owners of their memory). The rows themselves are not kept: a live array keeps its memory where it is (numpy
    refuses to resize an array others reference), and GC-tracked objects held per request in flight slow down
    every collection."""

    __slots__ = ("array", "count", "keep", "arrays", "nbytes")

    def __init__(self, rows: Sequence[InputRow], keep: Any = None,
                 arrays: tuple[np.ndarray, ...] = (), nbytes: int = 0) -> None:
        self.count = len(rows)
        # one initializer call: several times faster than filling the fields one by one
        if _new is None:  # no backend loaded yet (no input array was described)
            select_backend(None)
        self.array = _new(_desc_array, rows if rows else 1)
        self.keep = keep
        self.arrays = arrays
        self.nbytes = nbytes


def buffer_pointer(array: np.ndarray) -> Any:
    """A void* over a C-contiguous array; the cdata keeps the array alive."""
    return ffi.cast("void *", ffi.from_buffer(array, require_writable=False)) if array.nbytes else ffi.NULL


def from_buffer(obj: Any, require_writable: bool = False) -> Any:
    """``ffi.from_buffer`` of the backend in use. select_backend() rebinds this name to that bound method: it is
    called for every input array of every run, and a wrapper frame would cost as much as the call itself."""
    select_backend(None)
    return ffi.from_buffer(obj, require_writable=require_writable)


# --- native tensors ------------------------------------------------------------------------------------------

# How a run's output becomes a Python object is the caller's: every function here that returns outputs takes an
# OutputFactory. Its ``view(owner, address, nbytes, ge_dtype, placement, shape)`` wraps the runtime's memory, where
# ``owner`` is a cdata whose collection destroys the ga_tensor (and so frees or returns its memory); its
# ``copy(array)`` wraps a numpy array a small host output was copied into. The tensor layer passes ``TENSORS``.
_T = TypeVar("_T")

# Host outputs of at most this many bytes are copied into numpy memory when their data is final (synchronous runs and
# RunGraphAsync completions) and their native tensors freed at once: creating a numpy array and copying a few KiB
# costs less than keeping a native owner and making a view of it when the output is read (measured: a 4x4 Relu run
# and its output read with .numpy() 6.6 -> 5.3 us; Relu on 16-32 KiB, run and read, 1.35x -> 1.05x onnxruntime with
# a copy instead of a view; at 64 KiB the two cost the same, above it a view wins). The twin pads its host output
# blocks so the copy does not meet glibc's slow `rep movsb` case on AMD CPUs (see CopyBytes in the twin).
OUTPUT_COPY_MAX = 64 * 1024


class OutputFactory(Generic[_T]):
    """How the caller wraps outputs: ``view`` for runtime memory kept alive by an owner, ``copy`` for a numpy array
    a small host output was copied into (with its nbytes, shape and dtype, known already)."""

    __slots__ = ("view", "copy")

    def __init__(self, view: Callable[[Any, int, int, int, int, tuple[int, ...]], _T],
                 copy: Callable[[np.ndarray, int, tuple[int, ...], np.dtype], _T]) -> None:
        self.view = view
        self.copy = copy


def host_view(owner: Any, address: int, nbytes: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """A numpy view of a host output. ``owner`` is the ``char *`` to its data that _wrap_runtime_memory made (its
    collection destroys the tensor); the view's buffer holds it, so the memory lives as long as the view."""
    need = math.prod(shape) * dtype.itemsize
    if need == 0 or nbytes == 0:
        return np.empty(shape, dtype=dtype)
    if need > nbytes:
        raise GeError(FAILED, f"the runtime described a host output of {nbytes} bytes as {list(shape)} {dtype} "
                      f"({need} bytes)", "geasync")
    return np.ndarray(shape, dtype, ffi.buffer(owner, need))


_scratch = threading.local()  # per-thread buffer for taking outputs (grown on demand)


def _take_outputs(outs: Any, make: OutputFactory[_T], copy: bool) -> list[_T]:
    """Owns the outputs of a run: one native call describes them all and frees the list."""
    try:
        infos, cap = _scratch.infos, _scratch.cap
    except AttributeError:
        cap = _scratch.cap = 8
        infos = _scratch.infos = ffi.new("ga_output_info[]", cap)
    n = lib.ga_outputs_take_all(outs, infos, cap)
    if n > cap:  # more outputs than ever before on this thread: grow and take them
        cap = _scratch.cap = n
        infos = _scratch.infos = ffi.new("ga_output_info[]", cap)
        lib.ga_outputs_take_all(outs, infos, cap)
    return _wrap_outputs(infos, 0, n, make, copy)


# What _wrap_outputs derived from each output layout the shim named (ga_output_info.layout): for a host output of a
# numpy dtype of at most OUTPUT_COPY_MAX bytes (one a final run copies), (numpy dtype, shape, nbytes); else None.
# Reading an output's fields through cffi costs more than copying a small one, and a service's outputs repeat a few
# layouts: with the id, a run reads two fields per output (measured: ~0.4 us less per output of a 4x4 run).
_layouts: dict[int, tuple[np.dtype, tuple[int, ...], int] | None] = {}


def _learn_layout(o: Any) -> tuple[np.dtype, tuple[int, ...], int] | None:
    """What an output's description means for _wrap_outputs (kept under its layout id when it has one)."""
    dt = _GE_TO_NP.get(o.dtype)
    if dt is None and o.dtype == DT_BF16:
        dt = _bfloat16()
    entry = None
    size = o.size
    if dt is not None and o.placement == PLACEMENT_HOST and size <= OUTPUT_COPY_MAX:  # noqa: F821 (bound with
        shape = tuple(_unpack(o.dims, o.ndim))                                        # the backend)
        if math.prod(shape) * dt.itemsize == size:
            entry = (dt, shape, size)
    if o.layout:
        _layouts[o.layout] = entry
    return entry


def _wrap_outputs(infos: Any, start: int, n: int, make: OutputFactory[_T], copy: bool,
                  release: bool = True, items: Sequence[Any] | None = None) -> list[_T]:
    """The output factory's objects for the taken tensors infos[start:start + n]. With ``copy`` (the data is final:
    not a stream-mode run's), host outputs of at most OUTPUT_COPY_MAX bytes of a numpy dtype are copied into numpy
    arrays; every other output is owned by a cdata whose collection destroys it. One native call at the end frees
    the copied tensors, and, should wrapping one fail, the ones not wrapped yet: none leaks. Without ``release``,
    the caller makes that call (CompletionQueue.drain: once for a whole drained batch). ``items``: infos' struct
    cdata, made once by a caller that reuses ``infos`` (indexing the array makes a new one every time)."""
    result = []
    layouts, learn, memmove, empty, wrap = _layouts, _learn_layout, _memmove, np.empty, make.copy  # read once
    get = infos if items is None else items
    try:
        for i in range(start, start + n):
            o = get[i]
            if copy:
                try:
                    entry = layouts[o.layout]
                except KeyError:
                    entry = learn(o)
                if entry is not None:
                    dt, shape, size = entry
                    arr = empty(shape, dt)
                    if size:
                        memmove(arr, o.data, size)
                    result.append(wrap(arr, size, shape, dt))
                    continue  # its tensor is freed below
            result.append(_wrap_runtime_memory(o, make))
    finally:
        if release:
            _release_infos_call(infos + start if start else infos, n)
    return result


def _wrap_runtime_memory(o: Any, make: OutputFactory[_T]) -> _T:
    """An output left in runtime memory: a cdata whose collection destroys its tensor owns it from here on. For a
    host output that cdata is a ``char *`` to the data, so its numpy view (host_view) is a buffer of the owner
    itself: one native object per output, not a second one to keep the first alive."""
    handle, o.handle = o.handle, ffi.NULL  # first: an interruption between the two steps leaks, never frees twice
    if o.placement == PLACEMENT_HOST:  # noqa: F821 (bound with the backend, _bind_abi_constants)
        owner = ffi.gc(ffi.cast("char *", o.address), functools.partial(lib.ga_tensor_destroy_with_data, handle))
    else:
        owner = ffi.gc(handle, lib.ga_tensor_destroy)
    return make.view(owner, o.address, o.size, o.dtype, o.placement, tuple(_unpack(o.dims, o.ndim)))


# --- sessions and graphs -------------------------------------------------------------------------------------

def session_create(options: Mapping[str, str], context: str) -> Any:
    opts, keep = _options(options)
    out = ffi.new("ga_session **")
    _check(lib.ga_session_create(opts, out), "GeSession", context)
    return out[0]


def session_destroy(handle: Any) -> None:
    lib.ga_session_destroy(handle)


def session_id(handle: Any) -> int:
    return int(lib.ga_session_id(handle))


def graph_parse_onnx(model: bytes, context: str) -> Any:
    out = ffi.new("ga_graph **")
    buf = ffi.from_buffer(model)
    _check(lib.ga_graph_parse_onnx(buf, len(model), ffi.NULL, out), "aclgrphParseONNXFromMem", context)
    return ffi.gc(out[0], lib.ga_graph_destroy)


def add_graph(handle: Any, graph_id: int, graph: Any, options: Mapping[str, str], clone: bool, context: str) -> None:
    opts, keep = _options(options)
    fn = lib.ga_session_add_graph_clone if clone else lib.ga_session_add_graph
    _check(fn(handle, graph_id, graph, opts), "GeSession::AddGraphClone" if clone else "GeSession::AddGraph", context)


def remove_graph(handle: Any, graph_id: int, context: str) -> None:
    _check(lib.ga_session_remove_graph(handle, graph_id), "GeSession::RemoveGraph", context)


def compile_graph(handle: Any, graph_id: int, inputs: PreparedInputs | None, context: str) -> None:
    if inputs is None:
        _check(lib.ga_session_compile_graph(handle, graph_id, ffi.NULL, 0, 0), "GeSession::CompileGraph", context)
    else:
        _check(lib.ga_session_compile_graph(handle, graph_id, inputs.array, inputs.count, 1), "GeSession::CompileGraph",
               context)


def load_graph(handle: Any, graph_id: int, options: Mapping[str, str], stream: int, context: str) -> None:
    opts, keep = _options(options)
    _check(lib.ga_session_load_graph(handle, graph_id, opts, pointer(stream)), "GeSession::LoadGraph", context)


def is_graph_need_rebuild(handle: Any, graph_id: int) -> bool:
    return bool(lib.ga_session_is_graph_need_rebuild(handle, graph_id))


def compiled_graph_summary(handle: Any, graph_id: int, context: str) -> dict[str, Any]:
    summary = ffi.new("ga_graph_summary *")
    cap = 64
    while True:
        descs = ffi.new("ga_tensor_desc[]", cap)
        _check(lib.ga_session_get_compiled_graph_summary(handle, graph_id, summary, descs, cap),
               "GeSession::GetCompiledGraphSummary", context)
        if summary.output_count <= cap:
            break
        cap = int(summary.output_count)
    outputs = []
    for i in range(summary.output_count):
        d = descs[i]
        dt = _GE_TO_NP.get(int(d.dtype))
        outputs.append((tuple(int(d.dims[k]) for k in range(d.ndim)), dt))
    return {
        "is_static": bool(summary.is_static),
        "const_memory_size": int(summary.const_memory_size),
        "feature_memory_size": int(summary.feature_memory_size),
        "stream_num": int(summary.stream_num),
        "event_num": int(summary.event_num),
        "outputs": outputs,
    }


_sync = threading.local()  # a thread's input descriptors and out-parameters of synchronous runs: made on first use


class _Slots:
    """A per-thread ga_tensor_desc array, filled by ``describe``. ``items[i]`` is the struct cdata of slot i (made
    once: indexing the array makes a new one every time), ``held[i]`` what the slot was last filled with but the data
    pointer, (nbytes, dtype, placement, ndim, shape) as the row has them, or None (never filled, or a fill was
    interrupted). A slot that already describes the same layout gets its data pointer alone: a service's runs repeat
    the same inputs, and converting a whole row (its 25 dims) costs far more than one field's assignment. The data
    pointer is not held: a slot must not keep its last run's input alive."""

    __slots__ = ("array", "items", "held")

    def __init__(self, n: int) -> None:
        self.array = ffi.new("ga_tensor_desc[]", n)
        self.items = [self.array[i] for i in range(n)]
        self.held: list[Any] = [None] * n

    def describe(self, rows: Sequence[InputRow]) -> Any:
        """The array, describing ``rows``."""
        items, held = self.items, self.held
        for i, row in enumerate(rows):
            h = held[i]
            if h is not None and row[5] == h[4] and row[2] == h[1] and row[1] == h[0] and row[3] == h[2]:
                items[i].data = row[0]
            else:
                held[i] = None  # a conversion that raises part-way leaves the slot unknown
                self.array[i] = row
                held[i] = row[1:]
        return self.array


def run_graph(handle: Any, graph_id: int, rows: Sequence[tuple[Any, int, int, int, int, tuple[int, ...]]],
              context: str, make: OutputFactory[_T]) -> list[_T]:
    """RunGraph of inputs described by ``rows`` (as PreparedInputs takes them; the caller keeps what they point to
    alive). The descriptors go into a per-thread buffer (see _Slots): the runtime reads them only during the call,
    and filling one costs less than a new array. The shim serialises synchronous runs (GE's RunGraph fails a
    concurrent caller), waiting with the GIL released, and describes the outputs in the same call. ``context`` is
    formatted with ``graph_id`` only if the run fails (this is the per-call path users time)."""
    try:
        slots, infos, items, count, overflow = _sync.run
    except AttributeError:
        infos = ffi.new("ga_output_info[]", 8)
        slots, infos, items, count, overflow = _sync.run = (
            _Slots(4), infos, [infos[i] for i in range(8)], ffi.new("size_t *"), ffi.new("ga_outputs **"))
    n_in = len(rows)
    if n_in > len(slots.held):  # more inputs than ever before on this thread
        slots = _Slots(n_in)
        _sync.run = (slots, infos, items, count, overflow)
    status = _run_graph_call(handle, graph_id, slots.describe(rows), n_in, infos, len(items), count, overflow)
    if status != 0:
        _check(status, "GeSession::RunGraph", context.format(graph_id=graph_id))
    n = count[0]
    if n > len(items):  # more outputs than ever before on this thread: grow, and take them from the list
        infos = ffi.new("ga_output_info[]", n)
        items = [infos[i] for i in range(n)]
        _sync.run = (slots, infos, items, count, overflow)
        lib.ga_outputs_take_all(overflow[0], infos, n)
    return _wrap_outputs(infos, 0, n, make, True, True, items)


def run_graph_with_stream_completion(handle: Any, graph_id: int, stream: int, inputs: PreparedInputs,
                                     queue: "CompletionQueue", token: int, context: str,
                                     make: OutputFactory[_T]) -> list[_T]:
    """RunGraphWithStreamAsync, and ``token`` completes on ``queue`` once the stream has passed the run (one native
    call: if the completion cannot be enqueued, the shim waits for the stream before raising)."""
    out = ffi.new("ga_outputs **")
    _callback_errors.clear()
    status = lib.ga_session_run_graph_with_stream_completion(handle, graph_id, pointer(stream), inputs.array,
                                                             inputs.count, out, queue.handle, token)
    if status != 0:
        message, api = _last_error("GeSession::RunGraphWithStreamAsync")
        err = GeError(status, message, api, context)
        raise err from _callback_errors.pop()
    return _take_outputs(out[0], make, False)  # the stream has not passed the run yet: no copies


# --- allocators --------------------------------------------------------------------------------------------

class _CallbackErrors(threading.local):
    """The last exception raised by a Python allocator callback on this thread (cffi cannot propagate it)."""

    def __init__(self) -> None:
        self.error: BaseException | None = None

    def clear(self) -> None:
        self.error = None

    def pop(self) -> BaseException | None:
        e, self.error = self.error, None
        return e


_callback_errors = _CallbackErrors()
_allocator_handles: dict[int, Any] = {}  # handle address -> ffi.new_handle(allocator), until the shim releases it
_allocator_lock = threading.RLock()  # the release callback can run from a finalizer while it is held


def _on_callback_error(exc_type: type[BaseException], exc_value: BaseException, tb: TracebackType | None) -> None:
    _callback_errors.error = exc_value


def _ga_py_alloc_malloc(user: Any, size: int) -> Any:
    allocator = ffi.from_handle(user)
    address = allocator.malloc(int(size))
    if not isinstance(address, int) or isinstance(address, bool):
        raise TypeError(f"{type(allocator).__name__}.malloc() must return an int address, got {type(address).__name__}")
    if not 0 <= address < 2**64:  # the cast would take it modulo 2^64: another address
        raise ValueError(f"{type(allocator).__name__}.malloc() must return an address (0 <= int < 2**64), got "
                         f"{address}")
    return ffi.cast("void *", address)


def _ga_py_alloc_free(user: Any, addr: Any) -> None:
    ffi.from_handle(user).free(address_of(addr))


def _ga_py_alloc_release(user: Any) -> None:
    with _allocator_lock:
        _allocator_handles.pop(address_of(user), None)


def _register_callbacks(module_ffi: Any) -> None:
    """The Python callbacks the shim calls on the thread that is inside a runtime call (allocator bridge)."""
    for fn in (_ga_py_alloc_malloc, _ga_py_alloc_free, _ga_py_alloc_release):
        module_ffi.def_extern(onerror=_on_callback_error)(fn)


def register_external_allocator(handle: Any, stream: int, allocator: Any, context: str) -> None:
    user = ffi.new_handle(allocator)
    with _allocator_lock:
        _allocator_handles[address_of(user)] = user
    status = lib.ga_session_register_external_allocator(handle, pointer(stream), lib._ga_py_alloc_malloc,
                                                        lib._ga_py_alloc_free, lib._ga_py_alloc_release, user)
    _check(status, "GeSession::RegisterExternalAllocator", context)


def register_default_allocator(handle: Any, stream: int, context: str) -> None:
    _check(lib.ga_session_register_default_allocator(handle, pointer(stream)), "GeSession::RegisterExternalAllocator",
           context)


def unregister_external_allocator(handle: Any, stream: int, context: str) -> None:
    _check(lib.ga_session_unregister_external_allocator(handle, pointer(stream)),
           "GeSession::UnregisterExternalAllocator", context)


# --- streams and device memory -------------------------------------------------------------------------------

def stream_create(device_id: int, context: str) -> int:
    out = ffi.new("void **")
    _check(lib.ga_stream_create(device_id, out), "aclrtCreateStream", context)
    return address_of(out[0])


def stream_destroy(stream: int, context: str) -> None:
    _check(lib.ga_stream_destroy(pointer(stream)), "aclrtDestroyStream", context)


def stream_synchronize(stream: int, timeout_ms: int, context: str) -> None:
    _check(lib.ga_stream_synchronize(pointer(stream), timeout_ms), "aclrtSynchronizeStream", context)


def stream_query(stream: int, context: str) -> bool:
    out = ffi.new("int *")
    _check(lib.ga_stream_query(pointer(stream), out), "aclrtStreamQuery", context)
    return bool(out[0])


def device_malloc(size: int, device_id: int, context: str) -> int:
    out = ffi.new("void **")
    _check(lib.ga_device_malloc(device_id, size, out), "aclrtMalloc", context)
    return address_of(out[0])


def device_free(address: int, context: str) -> None:
    _check(lib.ga_device_free(pointer(address)), "aclrtFree", context)


def device_buffer(size: int, device_id: int, context: str) -> Any:
    """Device memory owned by the returned cdata (freed with aclrtFree when it is collected)."""
    address = device_malloc(max(1, size), device_id, context)
    return ffi.gc(ffi.cast("char *", address), lib.ga_device_free)


def memcpy(dst: Any, dst_max: int, src: Any, count: int, kind: int, context: str) -> None:
    if count == 0:
        return
    _check(lib.ga_memcpy(dst, dst_max, src, count, kind), "aclrtMemcpy", context)


# --- completion queues (the event-loop layer) ----------------------------------------------------------------



class CompletionQueue:
    """A native completion queue: runtime threads push records and write its eventfd once per batch.

    Only its consumer drains it (one event loop's hub, or the orphan reaper once that loop is gone).
    ``close()`` drops the consumer's reference; the native queue lives on until the runtime holds none.
    """

    __slots__ = ("_cq", "fd", "_buf", "_cap", "_infos", "_make", "_records", "_outputs")

    def __init__(self, make: Any = None, capacity: int = 256) -> None:
        """``make``: the output factory for the outputs its records carry (None for a queue of host functions)."""
        self._make = make
        out = ffi.new("ga_completion_queue **")
        _check(lib.ga_cq_create(out), "eventfd", "geasync completion hub")
        self._cq = out[0]
        self.fd = int(lib.ga_cq_fd(self._cq))
        self._cap = capacity
        self._buf = ffi.new("ga_completion[]", capacity)
        self._infos = ffi.new("ga_output_info[]", capacity)  # the outputs of one drained batch (one per run, usually)
        # their struct cdata, made once (indexing the arrays makes a new one every time)
        self._records = [self._buf[i] for i in range(capacity)]
        self._outputs = [self._infos[i] for i in range(capacity)]

    def drain(self) -> list[tuple[int, int, int, Any, str]]:
        """(token, status, kind, outputs, error text) records; re-arms the eventfd first, so none is missed.

        ``outputs`` is None, the outputs made by the output factory, or the exception raised making them (it
        belongs to that record alone: the rest of the batch is unaffected)."""
        records = []
        buf, infos, cap, make = self._buf, self._infos, self._cap, self._make
        items, outputs = self._records, self._outputs
        while True:
            n = lib.ga_cq_drain_outputs(self._cq, buf, cap, infos, cap)  # one call takes the batch's outputs too
            pos = 0
            done = False
            try:
                for i in range(n):
                    c = items[i]
                    k = c.output_count
                    outs: Any
                    if k == -1:
                        outs = None
                    else:
                        try:
                            if k >= 0:
                                outs = _wrap_outputs(infos, pos, k, make, True, False, outputs)
                            else:  # more outputs than the batch buffer had room for: still a list to take
                                handle, c.outputs = c.outputs, ffi.NULL
                                outs = _take_outputs(handle, make, True)
                        except Exception as exc:
                            outs = exc
                        if k > 0:
                            pos += k
                    text = ""
                    if c.error_message:  # only failures carry text to free
                        text = ffi.string(c.error_message).decode("utf-8", "replace")
                        lib.ga_completion_release(ffi.addressof(buf, i))
                    records.append((c.token, c.status, c.kind, outs, text))
                done = True
            finally:
                # One native call frees the batch's copied outputs (and any a failure left unwrapped). Interrupted
                # (KeyboardInterrupt), it frees every output the batch described: the records not reached are lost
                # either way, their tensors are not.
                if not done:
                    pos = sum(max(buf[j].output_count, 0) for j in range(n))
                _release_infos_call(infos, pos)
            if n < cap:
                return records

    def pending(self) -> int:
        return int(lib.ga_cq_pending(self._cq))

    def poll(self, budget_ns: int) -> int:
        """Watches for records for at most ``budget_ns`` (their producers skip the eventfd meanwhile); returns how
        many wait. The caller drains them, or ``signal()``s if it cannot: nothing else would wake the reader."""
        return int(lib.ga_cq_poll(self._cq, budget_ns))

    def signal(self) -> None:
        lib.ga_cq_signal(self._cq)

    def close(self) -> None:
        cq, self._cq = self._cq, ffi.NULL
        if cq != ffi.NULL:
            lib.ga_cq_destroy(cq)

    @property
    def handle(self) -> Any:
        return self._cq


# RunGraphAsync reads its input descriptors only while it is called (the shim turns them into GE's tensors, which
# point at the data, before it returns): a submit describes its rows in a per-thread buffer, a batch in one array
# for all its requests, instead of an array per request that lives as long as the run.

def run_graph_async_submit(handle: Any, graph_id: int, rows: Sequence[InputRow], queue: CompletionQueue, token: int,
                           context: str) -> None:
    """RunGraphAsync of inputs described by ``rows`` (as PreparedInputs takes them; the caller keeps what they point
    to alive until the completion): submits and returns at once; the completion arrives on ``queue`` under
    ``token``."""
    try:
        slots = _sync.submit
    except AttributeError:
        slots = _sync.submit = _Slots(4)
    n = len(rows)
    if n > len(slots.held):  # more inputs than ever before on this thread
        slots = _sync.submit = _Slots(n)
    status = lib.ga_session_run_graph_async(handle, graph_id, slots.describe(rows), n, queue.handle, token)
    _check(status, "GeSession::RunGraphAsync", context)


def run_graph_async_batch(items: list[tuple[Any, int, Sequence[InputRow], int]], queue: CompletionQueue) -> None:
    """Submits (session handle, graph id, input rows, token) requests in one call; refused ones complete on
    ``queue``."""
    all_rows: list[InputRow] = []
    for item in items:
        all_rows += item[2]
    descs = _new(_desc_array, all_rows) if all_rows else _new(_desc_array, 1)  # one conversion call for the batch
    submits = []
    at = 0
    for handle, graph_id, rows, token in items:
        n = len(rows)
        submits.append((handle, graph_id, descs + at, n, token))
        at += n
    lib.ga_run_graph_async_batch(ffi.new("ga_async_submit[]", submits), len(submits), queue.handle)


def stream_launch_completion(stream: int, queue: CompletionQueue, token: int, context: str) -> None:
    """aclrtLaunchHostFunc on ``stream``: when the stream reaches it, ``token`` completes on ``queue``."""
    _check(lib.ga_stream_launch_completion(pointer(stream), queue.handle, token), "aclrtLaunchHostFunc", context)


def bench_native_run_graph_async(handle: Any, graph_id: int, inputs: PreparedInputs, runs: int,
                                 in_flight: int) -> float:
    """Seconds for ``runs`` RunGraphAsync calls driven natively with ``in_flight`` outstanding (benchmarks only)."""
    elapsed = ffi.new("uint64_t *")
    status = lib.ga_bench_native_run_graph_async(handle, graph_id, inputs.array, inputs.count, runs, in_flight, elapsed)
    _check(status, "GeSession::RunGraphAsync", "native benchmark driver")
    return float(elapsed[0]) / 1e9


# --- twin-only controls --------------------------------------------------------------------------------------

def require_twin(what: str) -> None:
    """Twin-only controls have no CANN equivalent: a clear error instead of a missing symbol."""
    select_backend(None)
    if BACKEND != "twin":
        raise GeError(FAILED, f"{what} is a twin-only control: this process runs on the {BACKEND!r} backend, "
                      "where the real runtime cannot be made to fail on purpose. Run the test on the twin "
                      "(Session(backend='twin') or GEASYNC_BACKEND=twin).", "geasync.twin", what)


def twin_check_onnx(model: bytes) -> str:
    """The twin's model check report (text lines, see twin_control.h), whichever backend this process uses."""
    from . import _preload

    _preload.preload()
    module = importlib.import_module(_BACKEND_MODULES["twin"])
    cap = 1 << 16
    while True:
        buf = module.ffi.new("char[]", cap)
        n = int(module.lib.geasync_twin_check_onnx(model, len(model), buf, cap))
        if n < cap:
            report: str = module.ffi.string(buf).decode("utf-8", "replace")
            return report
        cap = n + 1


def twin_fault_add(session_id: int, graph_id: int, kind: str, nth: int, status: int, delay_ms: int) -> None:
    """Arms a fault; ``kind`` is a name of twin_control.h's GEASYNC_TWIN_FAULT_* kinds, lower case."""
    require_twin("geasync.twin.inject_fault")
    code = getattr(lib, f"GEASYNC_TWIN_FAULT_{kind.upper()}")
    if lib.geasync_twin_fault_add(session_id, graph_id, code, nth, status, delay_ms) != 0:
        raise ValueError(f"invalid fault: kind={kind}, delay_ms={delay_ms}")


def twin_fault_release(session_id: int, graph_id: int) -> None:
    require_twin("geasync.twin.release_stalled")
    lib.geasync_twin_fault_release(session_id, graph_id)


def twin_fault_clear(session_id: int, graph_id: int) -> None:
    require_twin("geasync.twin.clear_faults")
    lib.geasync_twin_fault_clear(session_id, graph_id)


def set_memory_limit(session_id: int, nbytes: int) -> None:
    """geasync.max_memory_bytes: the bytes one compiled plan of the session may hold (enforced by the twin, whose
    plans are host memory; on CANN, GE plans device memory itself and reports what it cannot fit)."""
    select_backend(None)
    if BACKEND == "twin":
        lib.geasync_twin_set_memory_limit(session_id, nbytes)


def twin_fault_runs(session_id: int, graph_id: int) -> int:
    require_twin("geasync.twin.fault_runs")
    return int(lib.geasync_twin_fault_runs(session_id, graph_id))


def twin_fault_unfired(session_id: int, graph_id: int) -> int:
    require_twin("geasync.twin.unfired_faults")
    return int(lib.geasync_twin_fault_unfired(session_id, graph_id))
