"""What a session knows of each graph it holds (its declared inputs and outputs), and the check of a run's inputs
against them before the runtime sees the request.

GE stops a session's whole RunGraphAsync queue after one request fails to compile, so an input of the wrong dtype or
shape must never reach it: ``GraphSpec`` refuses it with an ``InputError`` naming the input, what was given, what the
graph declares, the API and the graph id. The check runs on every request: the common case costs a comparison and a
set lookup per input (shapes already seen to match are remembered), the full check runs only for a new shape.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, TypeVar

from . import _dtypes, _lib
from ._metadata import TensorInfo
from .errors import PARAM_INVALID, GeError, InputError, InputTypeError

__all__ = ["GraphSpec", "run_context", "declared_output_mismatches"]

_MAX_REMEMBERED_SHAPES = 64  # per input: bounds the memory a stream of distinct shapes can take
_API = "geasync input check"
GRAPH_NOT_EXIST = 1343242242
_V = TypeVar("_V")


def _ge_dtype_or_none(dtype: Any) -> Optional[int]:
    try:
        return _lib.ge_dtype(dtype)
    except TypeError:  # a declared dtype GE lacks (complex): the run reports it
        return None


def run_context(api: str, graph_id: int) -> str:
    """The call an input error names: a Session method by its name ("run_graph"), another API by its own
    ("Batcher.run")."""
    return f"{api}(graph_id={graph_id})" if "." in api else f"Session.{api}(graph_id={graph_id})"


def _dim_text(d: Any) -> str:
    return "?" if d is None else str(d)


def _shape_text(shape: Optional[tuple[Any, ...]]) -> str:
    return "any shape" if shape is None else "[" + ", ".join(_dim_text(d) for d in shape) + "]"


def declared_output_mismatches(declared: Sequence[TensorInfo],
                               computed: Sequence[tuple[tuple[int, ...], Any]]) -> list[str]:
    """What a compiled graph's outputs (GetCompiledGraphSummary: dims, -1 unknown, [-2] unknown rank; numpy dtype or
    None) contradict in the model's declaration, one text per output. Only definite contradictions count: a
    symbolic or unknown dim, an output declared with no shape or no dtype, an unknown rank or dtype never does."""
    found = []
    for info, (dims, dtype) in zip(declared, computed, strict=False):  # the counts agree; never raise here
        what = []
        if info.dtype is not None and dtype is not None and info.dtype != dtype:
            what.append(f"dtype {info.dtype} but runs return {dtype}")
        if info.shape is not None and list(dims) != [-2]:
            if len(dims) != len(info.shape) or any(type(want) is int and got >= 0 and want != got
                                                   for want, got in zip(info.shape, dims, strict=True)):
                computed_shape = tuple(None if d < 0 else d for d in dims)
                what.append(f"shape {_shape_text(info.shape)} but the graph computes {_shape_text(computed_shape)}")
        if what:
            found.append(f"output {info.name!r} is declared with {' and '.join(what)}")
    return found


class GraphSpec:
    """One added graph's declared inputs and outputs, and the check of a run's inputs against them.

    ``want_dtypes[i]`` is input i's ge::DataType (None: not checked), ``ok_shapes[i]`` the shapes seen to match it,
    ``usual_shapes[i]`` one of them (the fixed shape, or the first seen), compared first.
    """

    __slots__ = ("graph_id", "inputs", "outputs", "names", "index", "count", "want_dtypes", "patterns", "ok_shapes",
                 "usual_shapes", "async_seen", "fixed_by")

    def __init__(self, graph_id: int, inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo]) -> None:
        self.graph_id = graph_id
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.names = tuple(i.name for i in self.inputs)
        self.index = {name: k for k, name in enumerate(self.names)}
        self.count = len(self.inputs)
        self.want_dtypes = [None if i.dtype is None else _ge_dtype_or_none(i.dtype) for i in self.inputs]
        # per input: None (any shape) or a tuple with an int per fixed dim and None per free one
        self.patterns = [None if i.shape is None else tuple(d if type(d) is int else None for d in i.shape)
                         for i in self.inputs]
        self.ok_shapes = [{p} if p is not None and None not in p else set() for p in self.patterns]
        # per input: the fixed shape, or the first shape seen to match; compared before the set lookup (cheaper)
        self.usual_shapes = [p if p is not None and None not in p else None for p in self.patterns]
        self.async_seen = False  # whether a run_graph_async of this graph was checked (see Session._first_async)
        self.fixed_by = ""  # why the shapes differ from the model's declaration, for messages

    def compiled(self, inputs: Sequence[Any], fixed_by: str) -> "GraphSpec":
        """The spec after CompileGraph with these inputs: GE fixes the Data nodes to their dtypes and shapes."""
        infos = [TensorInfo(info.name, x.dtype, tuple(int(d) for d in x.shape))
                 for info, x in zip(self.inputs, inputs, strict=True)]
        spec = GraphSpec(self.graph_id, infos, self.outputs)
        spec.async_seen = self.async_seen
        spec.fixed_by = fixed_by
        return spec

    # --- errors ---------------------------------------------------------------------------------------------
    def _error(self, cls: type[InputError], message: str, api: str, index: Optional[int] = None) -> InputError:
        name = None if index is None else self.names[index]
        return cls(PARAM_INVALID, message, _API, run_context(api, self.graph_id), graph_id=self.graph_id,
                   input_index=index, input_name=name)

    def _listing(self) -> str:
        return ", ".join(f"{info.name!r} ({_shape_text(info.shape)} {info.dtype})" for info in self.inputs) or "none"

    def count_error(self, got: int, api: str) -> InputError:
        return self._error(InputError, f"graph_id={self.graph_id} expects {self.count} input(s), got {got}; its "
                           f"inputs, in order: {self._listing()}", api)

    # --- the checks -----------------------------------------------------------------------------------------
    def check(self, i: int, dt: int, shape: tuple[int, ...], api: str) -> None:
        """Input i, of ge::DataType ``dt`` and ``shape``, against the declaration (the slow path: a new shape)."""
        info = self.inputs[i]
        want = self.want_dtypes[i]
        if want is not None and dt != want:
            given = _lib._GE_TO_NP[dt]
            raise self._error(InputTypeError, f"input {i} ({info.name!r}): dtype {given} does not match the graph's "
                              f"{info.dtype} (convert it: array.astype({_dtypes.dtype_name(info.dtype)}))", api, i)
        pattern = self.patterns[i]
        if pattern is not None and (len(shape) != len(pattern) or
                                    any(p is not None and p != d for p, d in zip(pattern, shape, strict=True))):
            note = " ('?' and named dims may be any size)" if None in pattern else ""
            if self.fixed_by:
                note = f" ({self.fixed_by})"
            raise self._error(InputError, f"input {i} ({info.name!r}): shape {list(shape)} does not match the "
                              f"graph's {_shape_text(info.shape)}{note}", api, i)
        ok = self.ok_shapes[i]
        if len(ok) < _MAX_REMEMBERED_SHAPES:
            ok.add(shape)
        if self.usual_shapes[i] is None:
            self.usual_shapes[i] = shape

    def order(self, feeds: Mapping[Any, _V], api: str) -> list[_V]:
        """A ``{name: array}`` feed as the list a run takes (the graph's input order)."""
        index = self.index
        if len(feeds) == self.count:
            try:
                return [feeds[name] for name in self.names]
            except KeyError:
                pass
        missing = [name for name in self.names if name not in feeds]
        unknown = [name for name in feeds if name not in index]
        parts = []
        if unknown:
            parts.append(f"unknown input name(s) {', '.join(map(repr, unknown))}")
        if missing:
            parts.append(f"missing input(s) {', '.join(map(repr, missing))}")
        raise self._error(InputError, f"{'; '.join(parts)}: the graph's inputs are {self._listing()}", api)


def no_graph_error(graph_id: int, what: str) -> GeError:
    return GeError(GRAPH_NOT_EXIST, f"graph_id={graph_id} does not exist in this session (add it with add_graph)",
                   "geasync", what)


def unknown_graph_feeds_error(graph_id: int, api: str) -> InputError:
    return InputError(PARAM_INVALID, f"inputs given by name, but graph_id={graph_id} was not added to this session, "
                      "so its input names are unknown", _API, run_context(api, graph_id), graph_id=graph_id)
