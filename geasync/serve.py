"""geasync on Ray Serve: one replica per NPU, each replica one Session with geasync's dynamic batcher.

Ray Serve schedules the replicas (across machines), routes HTTP and Python calls to them, restarts failed ones and
autoscales; geasync runs the model inside each replica. Needs the optional extra: ``pip install "geasync[serve]"``.

    from ray import serve
    from geasync.serve import GeasyncModel

    app = GeasyncModel.options(num_replicas=2).bind("mlp.onnx", max_batch_size=32)
    handle = serve.run(app)
    (y,) = await handle.infer.remote([x])          # numpy arrays in, numpy arrays out

One replica per NPU: ``GeasyncModel.options(ray_actor_options={"resources": {"NPU": 1}})``. Ray then sets
``ASCEND_RT_VISIBLE_DEVICES`` for the replica, and the replica opens its Session on that device (``ge.exec.deviceId``
"0", the first visible one). Without an NPU resource the replica runs on the twin, on CPUs.

HTTP (POST to the route prefix):
  * JSON: ``{"inputs": {"name": nested lists, ...}}`` or ``{"inputs": [nested lists, ...]}`` (in graph input
    order); the answer is ``{"outputs": {"name": nested lists, ...}}``;
  * a raw tensor for a single-input graph: ``Content-Type: application/octet-stream``, the C-order bytes of the
    input, its shape in the ``X-Shape`` header (``1,784``) and its dtype in ``X-Dtype`` (default: the graph's);
    the answer is the first output's raw bytes with ``X-Shape`` / ``X-Dtype`` headers.
  Bad input gets 400 with the reason, a body over ``max_body_bytes`` 413 (refused from its Content-Length, or as
  soon as it streams past the limit: never held whole); a broken session (the replica should be replaced) gets 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from . import _lib
from ._diagnostics import live_counters
from .batcher import Batcher
from .errors import GeError, SessionBrokenError
from .graph import Graph
from .session import Session

try:
    from ray import serve
    from ray.serve import metrics as serve_metrics
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("geasync.serve needs Ray Serve: pip install \"geasync[serve]\"") from exc

__all__ = ["GeasyncModel", "build_app", "replica_device_options"]

logger = logging.getLogger("geasync.serve")

_NPU_ENV = "ASCEND_RT_VISIBLE_DEVICES"  # set by Ray for a replica that holds NPU resources
_STATS_PERIOD = 1.0  # seconds between exports of the session's statistics to Serve's metrics


def replica_device_options(options: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """Session options for this replica's device: ``ge.exec.deviceId`` "0" (the first device Ray made visible)
    when Ray assigned NPUs and the caller did not choose a device; the options unchanged otherwise."""
    opts = dict(options or {})
    if os.environ.get(_NPU_ENV) and "ge.exec.deviceId" not in opts:
        opts["ge.exec.deviceId"] = "0"
    return opts


class _BadRequest(ValueError):
    """An HTTP body that cannot be made into the graph's inputs (answered with 400)."""


class _TooLarge(ValueError):
    """An HTTP body over the deployment's max_body_bytes (answered with 413)."""


class _GeasyncModel:
    """A Ray Serve deployment that serves one ONNX model with geasync (``GeasyncModel``, below).

    Args:
        model: an ONNX file path (readable on every node) or the model's bytes.
        options: Session options (GE options, ``geasync.*`` options); a device is added for NPU replicas.
        max_batch_size / max_delay: the dynamic batcher's bounds (``geasync.Batcher``); ``max_batch_size=1``
            turns batching off, and a graph whose inputs have no symbolic leading (batch) dim runs unbatched.
        backend: "auto" (CANN when this install has it, else the twin), "twin" or "cann".
        shutdown_report: a file to write the final statistics to (JSON) when the replica shuts down.
        max_body_bytes: the largest HTTP body taken (413 above it; 64 MiB by default).
    """

    def __init__(self, model: Any, *, options: Optional[Mapping[str, str]] = None, max_batch_size: int = 32,
                 max_delay: float = 0.002, backend: Optional[str] = None,
                 shutdown_report: Optional[str] = None, max_body_bytes: int = 64 << 20) -> None:
        if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or max_body_bytes <= 0:
            raise ValueError(f"GeasyncModel: max_body_bytes must be a positive int, got {max_body_bytes!r}")
        self._max_body_bytes = max_body_bytes
        if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or max_batch_size < 1:
            # 0 or -1 turned batching off silently, and "8" failed on a str/int comparison
            raise ValueError(f"GeasyncModel: max_batch_size must be a positive int (1: no batching), got "
                             f"{max_batch_size!r}")
        self._shutdown_report = shutdown_report
        self._session = Session(replica_device_options(options), backend=backend)
        self._graph_id = 1
        graph = Graph.from_onnx(model)
        self._session.add_graph(self._graph_id, graph)
        self._inputs = list(graph.inputs)
        self._outputs = list(graph.outputs)
        self._batcher: Optional[Batcher] = None
        # batching coalesces along a symbolic leading (batch) dim: a graph without one runs each request alone
        batchable = all(i.shape and not isinstance(i.shape[0], int) for i in self._inputs)
        if max_batch_size > 1 and batchable:
            self._batcher = Batcher(self._session, self._graph_id, max_batch_size=max_batch_size,
                                    max_delay=max_delay)
        self._gauges = {name: serve_metrics.Gauge(f"geasync_{name}", description=f"geasync Session.statistics().{name}")
                        for name in ("in_flight", "waiting", "completed", "failed", "cancelled", "pinned_bytes")}
        self._exporter: Optional[asyncio.Task[None]] = None
        self._closed = False
        self._final: Optional[dict[str, Any]] = None  # close()'s report
        logger.info("geasync replica ready: backend %s, device options %s", _lib.BACKEND,
                    {k: v for k, v in replica_device_options(options).items() if k == "ge.exec.deviceId"})

    # --- Python callers (DeploymentHandle) ---
    async def infer(self, inputs: Any) -> list[np.ndarray]:
        """The graph's outputs (numpy arrays, in graph output order) for ``inputs`` (a list of arrays in graph
        input order, or a ``{name: array}`` mapping)."""
        self._ensure_exporter()
        if isinstance(inputs, Mapping):
            inputs = self._session.input_list(self._graph_id, inputs)
        if self._batcher is not None:
            outputs = await self._batcher.run(inputs)
        else:
            outputs = await self._session.run_graph_async(self._graph_id, inputs)
        return [np.array(t, copy=True) for t in outputs]  # own copies: they cross a process boundary

    def statistics(self) -> dict[str, Any]:
        """This replica's session statistics and live native counters."""
        stats = self._session.statistics()
        return {"replica": _replica_id(), "session": _as_dict(stats), "live": live_counters(),
                "closed": self._closed}

    async def close(self) -> dict[str, Any]:
        """Waits for work in flight, closes the session and returns the final statistics (Serve calls it on
        replica shutdown through ``__del__``)."""
        if self._closed:
            while self._final is None:  # a concurrent close() is under way
                await asyncio.sleep(0.01)
            return self._final
        self._closed = True
        exporter, self._exporter = self._exporter, None
        if exporter is not None:
            _cancel(exporter)
        if self._batcher is not None:
            await self._batcher.aclose()
        await self._session.aclose()
        # after the close: nothing may stay in flight or pinned
        final = self._session.statistics()
        self._export_once(final)  # the gauges end on the closed session's counts, not on the last period's
        self._final = {"replica": _replica_id(), "session": _as_dict(final), "live": live_counters(), "closed": True}
        logger.info("geasync replica closed: %s", self._final)
        if self._shutdown_report:
            tmp = f"{self._shutdown_report}.tmp"
            with open(tmp, "w") as f:
                json.dump(self._final, f)
            os.replace(tmp, self._shutdown_report)  # readers never see half a report
        return self._final

    async def __del__(self) -> None:
        await self.close()

    # --- HTTP ---
    async def __call__(self, request: Any) -> Any:
        from starlette.responses import JSONResponse, Response

        try:
            body = await self._read_body(request)
            # a media type is case-insensitive (RFC 9110): "Application/Octet-Stream" is a raw tensor too
            media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
            if media_type == "application/octet-stream":
                feed = self._raw_input(body, request.headers)
                outputs = await self.infer(feed)
                first = np.ascontiguousarray(outputs[0])
                return Response(first.tobytes(), media_type="application/octet-stream",
                                headers={"X-Shape": ",".join(map(str, first.shape)), "X-Dtype": str(first.dtype)})
            feed = self._json_input(body)
            outputs = await self.infer(feed)
            names = [o.name for o in self._outputs]
            return JSONResponse({"outputs": {n: o.tolist() for n, o in zip(names, outputs, strict=True)}})
        except SessionBrokenError as exc:
            return JSONResponse({"error": str(exc)}, status_code=503)
        except _TooLarge as exc:
            return JSONResponse({"error": str(exc)}, status_code=413)
        except (_BadRequest, ValueError, TypeError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        except GeError as exc:
            return JSONResponse({"error": str(exc)}, status_code=500)

    async def _read_body(self, request: Any) -> bytes:
        # From Content-Length before reading anything, else while the body streams in (a chunked body has none):
        # a client cannot make the replica hold an arbitrarily large body.
        limit = self._max_body_bytes
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            raise _TooLarge(f"a body of {int(length)} bytes is over this deployment's max_body_bytes ({limit}): "
                            "split the request")
        chunks, size = [], 0
        async with contextlib.aclosing(request.stream()) as stream:  # closed now, not by the GC, when refused
            async for chunk in stream:
                size += len(chunk)
                if size > limit:
                    raise _TooLarge(f"a body over {limit} bytes is over this deployment's max_body_bytes: split "
                                    "the request")
                chunks.append(chunk)
        return b"".join(chunks)

    def _json_input(self, body: bytes) -> Any:
        try:
            doc = json.loads(body)
            items = doc["inputs"]
        except (ValueError, KeyError, TypeError, RecursionError):  # (a body of nested "[[[..." past the stack)
            raise _BadRequest('the body must be JSON {"inputs": {name: nested lists}} or {"inputs": [...]}') from None
        if isinstance(items, Mapping):
            declared = {i.name: i.dtype for i in self._inputs}
            unknown = sorted(set(items) - set(declared))
            if unknown:
                raise _BadRequest(f"unknown input names {unknown}; the graph's inputs are {list(declared)}")
            return {name: _as_array(value, declared[name], name) for name, value in items.items()}
        if isinstance(items, Sequence) and not isinstance(items, (str, bytes)):
            if len(items) != len(self._inputs):
                raise _BadRequest(f"the graph takes {len(self._inputs)} inputs, got {len(items)}")
            return [_as_array(value, i.dtype, i.name) for value, i in zip(items, self._inputs, strict=True)]
        raise _BadRequest('"inputs" must be an object (by name) or a list (in graph input order)')

    def _raw_input(self, body: bytes, headers: Mapping[str, str]) -> list[np.ndarray]:
        if len(self._inputs) != 1:
            raise _BadRequest(f"raw tensor bodies need a single-input graph; this one has {len(self._inputs)} "
                              "inputs: send JSON")
        try:
            shape = tuple(int(d) for d in headers.get("x-shape", "").split(",") if d.strip())
            dtype = np.dtype(headers.get("x-dtype") or self._inputs[0].dtype)
            array = np.frombuffer(body, dtype=dtype).reshape(shape)
        except (ValueError, TypeError) as exc:
            raise _BadRequest(f"bad raw tensor (X-Shape {headers.get('x-shape')!r}, X-Dtype "
                              f"{headers.get('x-dtype')!r}, {len(body)} bytes): {exc}") from None
        return [array]

    # --- metrics ---
    def _ensure_exporter(self) -> None:
        exporter = self._exporter
        if (exporter is None or exporter.get_loop().is_closed()) and not self._closed:  # (gone with its loop)
            # Exported at once, not in the task's first step: a request whose run completes while it is submitted
            # never yields, and a close() right after it would cancel the task before that step.
            self._export_once(self._session.statistics())
            self._exporter = asyncio.get_running_loop().create_task(self._export_statistics())

    def _export_once(self, stats: Any) -> None:
        values = _as_dict(stats)
        for name, gauge in self._gauges.items():
            gauge.set(float(values.get(name, 0)))

    async def _export_statistics(self) -> None:
        while True:
            await asyncio.sleep(_STATS_PERIOD)
            self._export_once(self._session.statistics())


# The deployment, made by a call rather than as a class decorator: type checkers then see a serve.Deployment
# (GeasyncModel.options(...).bind(...) type-checks in users' code), which is what the decorator makes at run time.
GeasyncModel: serve.Deployment = serve.deployment(name="GeasyncModel", max_ongoing_requests=1024)(_GeasyncModel)


def _as_array(value: Any, dtype: Any, name: str) -> np.ndarray:
    try:
        return np.asarray(value, dtype=dtype)
    except OverflowError as exc:  # a JSON number past the input's dtype (10**400 for float32, 2**40 for int32)
        raise _BadRequest(f"input '{name}' holds a number out of the range of {np.dtype(dtype)}: {exc}") from None


def _cancel(task: "asyncio.Task[Any]") -> None:
    """Cancels ``task`` from any thread. Its loop may be another one than the caller's (cancelled on its own
    thread), or closed: the task went with it, and cancelling it would schedule its wake-up on the closed loop
    ("Event loop is closed", which made close() fail before it closed the session)."""
    loop = task.get_loop()
    if loop.is_closed():
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        task.cancel()
        return
    try:
        loop.call_soon_threadsafe(task.cancel)
    except RuntimeError:  # closed meanwhile
        pass


def _replica_id() -> str:
    try:
        return str(serve.get_replica_context().replica_id.unique_id)
    except Exception:  # outside a replica (direct use in tests or scripts)
        return f"pid-{os.getpid()}"


def _as_dict(stats: Any) -> dict[str, Any]:
    as_dict = getattr(stats, "as_dict", None)
    if callable(as_dict):
        return dict(as_dict())
    return {name: getattr(stats, name) for name in stats.__dataclass_fields__}


def build_app(args: Mapping[str, Any]) -> serve.Application:
    """An application builder for ``serve run`` / Serve config files (``import_path: geasync.serve:build_app``),
    from ``args``: model (path), options, max_batch_size, max_delay, backend, shutdown_report, max_body_bytes."""
    known = {"model", "options", "max_batch_size", "max_delay", "backend", "shutdown_report", "max_body_bytes"}
    unknown = sorted(set(args) - known)
    if unknown or "model" not in args:
        raise ValueError(f"geasync.serve.build_app args: 'model' is required; known keys {sorted(known)}, "
                         f"unknown {unknown}")
    kwargs = {k: v for k, v in args.items() if k != "model"}
    return GeasyncModel.bind(args["model"], **kwargs)
