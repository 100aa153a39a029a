"""The types of what the public API takes, for annotating code that calls it (exported as ``geasync.TensorLike``,
``geasync.Inputs``, ``geasync.StreamLike`` and ``geasync.Options``).

    def predict(session: ga.Session, x: npt.NDArray[np.float32]) -> list[ga.Tensor]:
        return session.run_graph(1, [x])
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Union

from numpy.typing import NDArray

from .stream import Stream
from .tensor import Tensor

__all__ = ["Inputs", "Options", "StreamLike", "TensorLike"]

TensorLike = Union[Tensor, NDArray[Any]]
"""One input of a run: a geasync Tensor or a numpy array (of a dtype GE has; anything else raises TypeError)."""

TensorLikeList = Union[List[TensorLike], List[Tensor], List[NDArray[Any]]]
"""The inputs of a stream-mode run: a list (GE's contract) of Tensors, of arrays, or of both (``list`` is invariant,
so ``list[TensorLike]`` alone would refuse a ``list[Tensor]``; a list display that mixes them needs that annotation:
``xs: list[ga.TensorLike] = [tensor, array]``)."""

Inputs = Union[Sequence[TensorLike], Mapping[str, TensorLike]]
"""A run's inputs: a sequence (a list, a tuple) in the graph's input order, or a mapping keyed by input name."""

StreamLike = Union[Stream, int]
"""A stream: a geasync Stream, or a stream's address (an int, as GE's Python package takes it)."""

Options = Dict[str, str]
"""GE options (and geasync's own, ``geasync.*``): a dict of str to str."""
