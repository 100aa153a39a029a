"""geasync: asyncio-native execution over Huawei CANN Graph Engine v2 (``GeSession``).

On a machine without an Ascend NPU, geasync runs on its embedded native CPU twin of the GE v2 runtime.

    import numpy as np, geasync as ga
    with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp())  # or ga.Graph.from_onnx("model.onnx" | bytes | onnx.ModelProto)
        (y,) = s.run_graph(1, [np.random.rand(4, 784).astype(np.float32)])
"""

from . import _preload

_preload.check_built(__path__[0])  # one clear message when the extension is missing (e.g. the unbuilt source tree)

from ._diagnostics import live_counters
from ._lib import backends, current_backend, finalize
from .allocator import Allocator, DeviceAllocator
from .batcher import Batcher, BatcherClosedError, BatcherStatistics
from ._stats import SessionStatistics
from .errors import (ExecutionModeError, GeError, InputError, InputTypeError, SessionBrokenError,
                     SessionClosedError)
from ._metadata import ModelFormatError, TensorInfo, UnsupportedOpsetError
from .graph import Graph
from .pool import GraphPool
from .session import CompiledGraphSummary, Session
from .stream import Stream
from .tensor import Tensor
from ._types import Inputs, Options, StreamLike, TensorLike
from . import twin  # (twin-only test controls: ga.twin.inject_fault, ...)
from . import samples  # (sample models: ga.samples.mlp())

from ._version import __version__ as __version__  # noqa: E402  (the one place it is written: _version.py)

__all__ = [
    "Allocator",
    "Batcher",
    "BatcherClosedError",
    "BatcherStatistics",
    "CompiledGraphSummary",
    "DeviceAllocator",
    "ExecutionModeError",
    "GeError",
    "Graph",
    "GraphPool",
    "InputError",
    "InputTypeError",
    "Inputs",
    "ModelFormatError",
    "Options",
    "Session",
    "SessionBrokenError",
    "SessionClosedError",
    "SessionStatistics",
    "Stream",
    "StreamLike",
    "Tensor",
    "TensorInfo",
    "TensorLike",
    "UnsupportedOpsetError",
    "backends",
    "current_backend",
    "finalize",
    "live_counters",
    "samples",
    "twin",
]
