"""An inference service over HTTP: Starlette + uvicorn, geasync with dynamic batching.

    pip install ".[http]"
    python examples/http_service/app.py            # serves examples/models/mlp.onnx on http://127.0.0.1:8000

    curl -s localhost:8000/predict -H 'content-type: application/json' \\
         -d "{\\"inputs\\": [$(python -c 'print([0.5]*784)')]}"
    curl -s localhost:8000/stats ; curl -s localhost:8000/health ; curl -s localhost:8000/metrics

POST /predict takes a JSON body ``{"inputs": [[784 floats], ...]}`` (one row per sample) or raw float32 bytes
(``content-type: application/octet-stream``, rows of 784 values, shape in an optional ``x-shape: 2,784`` header; an
``x-dtype`` header, if sent, must say float32) and answers in kind, at most ``max_batch_size`` rows a request. Bad
input gets 400 (JSON values must be numbers: strings and booleans are refused, not converted), a body far larger
than that 413 (before it is read whole), a failed or broken runtime 503, a run that takes longer than the request
timeout 504. A request whose client disconnects is cancelled (its rows are dropped from the batch). The session is
opened and closed (``aclose``: in-flight requests finish first) by the application's lifespan.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import pathlib
from typing import Any, AsyncIterator, Optional

import anyio
import numpy as np
import sniffio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

import geasync as ga

MODEL = pathlib.Path(__file__).resolve().parent.parent / "models" / "mlp.onnx"
PARAM_INVALID = 1343225857  # GE's status for inputs the graph cannot take


class BadInput(ValueError):
    """The request body is not a batch of rows the model takes (answered with 400)."""
    status = 400


class BodyTooLarge(BadInput):
    """The body is larger than any batch of rows the service takes (answered with 413, before it is all read)."""
    status = 413


def create_app(model: Any = MODEL, *, features: int = 784, instances: int = 1, max_batch_size: int = 64,
               max_delay: float = 0.002, request_timeout: float = 10.0, session_options: Optional[ga.Options] = None,
               abandon_after: float = 30.0, freeze_gc: bool = False) -> Starlette:
    """The service: ``model`` (a path or ONNX bytes) with a symbolic batch dim and ``features`` inputs per row;
    ``instances`` loaded copies of it (a GraphPool) when more than one. ``freeze_gc``: once started, exempt what
    exists by then from CPython's full collections (``gc.freeze()``; what a server process wants, not a test)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        session = ga.Session(session_options, abandon_after=abandon_after)
        try:
            graph = ga.Graph.from_onnx(model)
            if instances > 1:
                target: Any = ga.GraphPool.add(session, graph, graph_ids=list(range(1, instances + 1)))
            else:
                session.add_graph(1, graph)
                target = 1
            batcher = ga.Batcher(session, target, max_batch_size=max_batch_size, max_delay=max_delay)
        except BaseException:
            session.close()
            raise
        app.state.session, app.state.batcher, app.state.disconnects = session, batcher, 0
        app.state.broken = None  # why the session broke (SessionBrokenError), once a request has seen it
        if freeze_gc:
            # Concurrent requests make CPython 3.11 run full collections a few times a second at a few thousand
            # requests/s, and each walked the ~40k objects of the imports (numpy, onnx, starlette, geasync): a
            # ~10 ms pause of every request and health probe. Frozen, a full collection walks only newer objects.
            gc.collect()
            gc.freeze()
        try:
            yield
        finally:
            if freeze_gc:
                gc.unfreeze()
            try:
                await batcher.aclose()
            finally:
                await session.aclose()

    async def predict(request: Request) -> Response:
        raw = is_raw(request)
        try:
            x = await (read_raw(request, features, max_batch_size) if raw else
                       read_json(request, features, max_batch_size))
        except BadInput as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        batcher: ga.Batcher = request.app.state.batcher
        try:
            outputs = await run_unless_disconnected(request, batcher, x, request_timeout)
        except TimeoutError:
            return JSONResponse({"error": f"no result within {request_timeout} s"}, status_code=504)
        except (ga.SessionBrokenError, ga.SessionClosedError, ga.BatcherClosedError) as exc:
            if isinstance(exc, ga.SessionBrokenError):  # for good: /health says so, so the process gets replaced
                request.app.state.broken = str(exc)
            return JSONResponse({"error": f"the model runtime is unavailable: {exc}"}, status_code=503)
        except ga.GeError as exc:
            if exc.status == PARAM_INVALID:
                return JSONResponse({"error": str(exc)}, status_code=400)
            return JSONResponse({"error": f"the model run failed: {exc}"}, status_code=503)
        except ValueError as exc:  # the batcher refused the rows (e.g. more than max_batch_size): the client's to fix
            return JSONResponse({"error": str(exc)}, status_code=400)
        if outputs is None:  # the client went away: nobody reads this
            request.app.state.disconnects += 1
            return Response(status_code=499)
        probs = outputs[0].numpy()
        if raw:
            return Response(np.ascontiguousarray(probs, np.float32).tobytes(), media_type="application/octet-stream",
                            headers={"x-shape": ",".join(map(str, probs.shape))})
        return JSONResponse({"outputs": probs.tolist()})

    async def stats(request: Request) -> Response:
        state = request.app.state
        body = {"session": state.session.statistics().as_dict(), "batcher": state.batcher.statistics().as_dict(),
                "disconnects": state.disconnects}
        return Response(json.dumps(body, default=str), media_type="application/json")

    async def health(request: Request) -> Response:
        session: ga.Session = request.app.state.session
        if session.closed:
            return JSONResponse({"status": "closed"}, status_code=503)
        if request.app.state.broken is not None:  # open, but every request fails: restart the service
            return JSONResponse({"status": "broken", "error": request.app.state.broken}, status_code=503)
        st = session.statistics()
        if st.abandoned:
            return JSONResponse({"status": "degraded", "abandoned": st.abandoned}, status_code=200)
        return JSONResponse({"status": "ok", "in_flight": st.in_flight})

    async def metrics(request: Request) -> Response:
        try:
            from prometheus_client import CollectorRegistry, generate_latest
            from geasync.prometheus import GeasyncCollector
        except ImportError:
            return PlainTextResponse("prometheus-client is not installed\n", status_code=501)
        registry = CollectorRegistry()
        registry.register(GeasyncCollector(request.app.state.session, batchers={"predict": request.app.state.batcher}))
        return Response(generate_latest(registry), media_type="text/plain; version=0.0.4")

    routes = [Route("/predict", predict, methods=["POST"]), Route("/stats", stats), Route("/health", health),
              Route("/metrics", metrics)]
    return Starlette(routes=routes, lifespan=lifespan)


_NUMBERS = frozenset((int, float))  # what json.loads makes of a JSON number (bool, a subclass of int, is not one)


async def read_json(request: Request, features: int, max_rows: int) -> np.ndarray:
    expected = f'expected a JSON body {{"inputs": [[{features} numbers], ...]}}'
    body = await read_body(request, body_limit(max_rows, features, 32))  # a JSON number: at most ~25 characters
    try:
        body = json.loads(body)
    except (ValueError, RecursionError) as exc:  # RecursionError: a body of nested "[[[..." past the stack
        raise BadInput(f"{expected}: {exc}") from None
    inputs = body.get("inputs") if isinstance(body, dict) else None
    if not isinstance(inputs, list) or not inputs:
        got = ("no rows" if inputs == [] else f'"inputs": {type(inputs).__name__}' if isinstance(body, dict) and
               "inputs" in body else f"a {type(body).__name__} with no \"inputs\"")
        raise BadInput(f"{expected}, got {got}")
    rows = inputs if isinstance(inputs[0], list) else [inputs]  # one row may come bare: [784 numbers]
    check_row_count(len(rows), max_rows)
    for k, row in enumerate(rows):
        # numpy would turn "0.5" and true into numbers: a client sending them has a bug worth telling it about
        if type(row) is not list or len(row) != features:
            got = f"{len(row)} values" if type(row) is list else type(row).__name__
            raise BadInput(f"{expected}: row {k} has {got}, expected {features} numbers")
        if not _NUMBERS.issuperset(map(type, row)):
            bad = next(v for v in row if type(v) not in _NUMBERS)
            raise BadInput(f"{expected}: row {k} holds {json.dumps(bad)[:40]}, which is not a JSON number "
                           "(strings and booleans are not converted)")
    try:
        # a number past float32 (1e39) becomes inf, refused below: no overflow warning (an error under -W error)
        with np.errstate(over="ignore"):
            x = np.array(rows, dtype=np.float32)
    except OverflowError:  # an integer beyond any float
        raise BadInput("inputs must be finite numbers") from None
    return check_rows(x, features)


def is_raw(request: Request) -> bool:
    # a media type's type and subtype are case-insensitive (RFC 9110): "Application/Octet-Stream" is raw too
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    return media_type == "application/octet-stream"


async def read_raw(request: Request, features: int, max_rows: int) -> np.ndarray:
    dtype = request.headers.get("x-dtype")
    if dtype is not None:
        # other bytes read as float32 would be other rows of garbage, answered with 200
        try:
            is_float32 = np.dtype(dtype) == np.float32
        except (TypeError, ValueError):  # not a dtype numpy knows
            is_float32 = False
        if not is_float32:
            raise BadInput(f"raw bodies are float32 values, got x-dtype {dtype[:40]!r}: send float32 or JSON")
    body = await read_body(request, body_limit(max_rows, features, 4))
    if len(body) % 4:
        raise BadInput(f"raw bodies are float32 values: {len(body)} bytes is not a multiple of 4")
    if features:
        check_row_count(len(body) // (4 * features), max_rows)
    x = np.frombuffer(body, dtype=np.float32)
    shape = request.headers.get("x-shape")
    try:
        x = x.reshape([int(d) for d in shape.split(",")] if shape else (-1, features))
    except ValueError as exc:
        raise BadInput(f"x-shape {shape!r} does not fit {x.size} float32 values: {exc}") from None
    return check_rows(x, features)


def body_limit(max_rows: int, features: int, bytes_per_value: int) -> int:
    # Four times the largest request taken: a body a few rows too long is read and refused with the row count
    # (400); a far larger one is refused unread (413). 64 MiB when the row width is not known.
    return max(4 * max_rows * features * bytes_per_value, 1 << 20) if features else 64 << 20


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) as soon as it is known to exceed ``limit`` bytes: from its Content-Length before
    reading anything, or while it streams in (a chunked body has none), so a huge body is never held whole."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise BodyTooLarge(f"a body of {int(length)} bytes is over the {limit} this service takes (at most the "
                           "batcher's max_batch_size rows): split the request")
    chunks, size = [], 0
    async with contextlib.aclosing(request.stream()) as stream:  # closed now, not by the GC, when refused
        async for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(f"a body over {limit} bytes is more than this service takes (at most the "
                                   "batcher's max_batch_size rows): split the request")
            chunks.append(chunk)
    return b"".join(chunks)


def check_row_count(rows: int, max_rows: int) -> None:
    if rows > max_rows:
        raise BadInput(f"{rows} rows in one request, at most {max_rows} are taken (the batcher's max_batch_size): "
                       "split the request")


def check_rows(x: np.ndarray, features: int) -> np.ndarray:
    if x.ndim == 1:
        x = x[None]
    if x.ndim != 2 or x.shape[1] != features or x.shape[0] < 1:
        raise BadInput(f"expected rows of {features} values, got shape {list(x.shape)}")
    if not np.isfinite(x).all():
        raise BadInput("inputs must be finite numbers")
    return np.ascontiguousarray(x)


async def run_unless_disconnected(request: Request, batcher: ga.Batcher, x: np.ndarray,
                                  timeout: float) -> Optional[list[ga.Tensor]]:
    """The request's outputs, or None if the client disconnected first (the request is then cancelled): servers
    do not cancel a handler when its client goes away, so watch the connection while the request runs."""
    if sniffio.current_async_library() == "asyncio":
        return await _run_unless_disconnected_asyncio(request, batcher, x, timeout)
    outputs = error = None
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        try:
            outputs = await batcher.run([x], timeout=timeout)
        except Exception as exc:  # raised bare below, not wrapped in an exception group by the task group
            error = exc
        tg.cancel_scope.cancel()
    if error is not None:
        raise error
    return outputs


async def _run_unless_disconnected_asyncio(request: Request, batcher: ga.Batcher, x: np.ndarray,
                                           timeout: float) -> Optional[list[ga.Tensor]]:
    """The same with a bare asyncio task (no task group): a few microseconds less per request on asyncio/uvloop."""
    handler = asyncio.current_task()
    assert handler is not None
    gone = False

    async def watch() -> None:
        nonlocal gone
        while (await request.receive())["type"] != "http.disconnect":
            pass
        gone = True
        handler.cancel()

    watcher = asyncio.get_running_loop().create_task(watch())
    try:
        return await batcher.run([x], timeout=timeout)
    except asyncio.CancelledError:
        uncancel = getattr(handler, "uncancel", None)  # Python 3.11+: other cancellations still propagate
        if gone and (uncancel is None or uncancel() == 0):
            return None
        raise
    finally:
        watcher.cancel()


def main() -> None:
    import uvicorn

    host = os.environ.get("HOST", "127.0.0.1")
    port = int(os.environ.get("PORT", "8000"))
    loop = "uvloop" if _has("uvloop") else "asyncio"
    uvicorn.run(create_app(freeze_gc=True), host=host, port=port, loop=loop, log_level="warning")


def _has(module: str) -> bool:
    try:
        __import__(module)
        return True
    except ImportError:
        return False


if __name__ == "__main__":
    main()
