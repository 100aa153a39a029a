"""The example HTTP service (examples/http_service) through httpx's ASGI transport, on asyncio, uvloop and trio:
JSON and raw-tensor bodies, batching under concurrency, 400 / 503 / 504, /stats and /health, a client that
disconnects, and the twin's fault injection (a failing run, a dropped callback)."""

from __future__ import annotations

import contextlib
import sys

import anyio
import numpy as np
import pytest

import geasync as ga
from conftest import ROOT, make_mlp, numpy_helper

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")

sys.path.insert(0, str(ROOT / "examples" / "http_service"))
from app import create_app  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120, method="thread")]

W = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in make_mlp().graph.initializer}


def reference(x: np.ndarray) -> np.ndarray:
    h = np.maximum(x.astype(np.float64) @ W["w1"] + W["b1"], 0.0)
    z = h @ W["w2"] + W["b2"]
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@contextlib.asynccontextmanager
async def service(**kwargs):
    app = create_app(make_mlp().SerializeToString(), **kwargs)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
            yield app, client


def rows(n, seed):
    return np.random.default_rng(seed).random((n, 784), dtype=np.float32)


async def test_json_and_raw_bodies(anyio_backend):
    async with service() as (app, client):
        x = rows(2, 0)
        r = await client.post("/predict", json={"inputs": x.tolist()})
        assert r.status_code == 200, r.text
        np.testing.assert_allclose(np.array(r.json()["outputs"]), reference(x), rtol=1e-4, atol=1e-6)
        r = await client.post("/predict", content=x.tobytes(), headers={"content-type": "application/octet-stream"})
        assert r.status_code == 200, r.text
        assert r.headers["x-shape"] == "2,10"
        probs = np.frombuffer(r.content, np.float32).reshape(2, 10)
        np.testing.assert_allclose(probs, reference(x), rtol=1e-4, atol=1e-6)


async def test_concurrent_requests_are_batched(anyio_backend):
    async with service(max_delay=0.01) as (app, client):
        xs = [rows(1, i) for i in range(40)]
        results: dict = {}

        async def one(i):
            r = await client.post("/predict", json={"inputs": xs[i].tolist()})
            results[i] = r

        async with anyio.create_task_group() as tg:
            for i in range(40):
                tg.start_soon(one, i)
        for i, r in results.items():
            assert r.status_code == 200, r.text
            np.testing.assert_allclose(np.array(r.json()["outputs"]), reference(xs[i]), rtol=1e-4, atol=1e-6)
        stats = (await client.get("/stats")).json()
        assert stats["batcher"]["completed"] == 40
        assert stats["batcher"]["batches"] < 40, stats["batcher"]
        assert stats["session"]["completed"] == stats["batcher"]["batches"]


async def test_bad_input_is_400(anyio_backend):
    async with service() as (app, client):
        for kwargs in ({"content": b"not json", "headers": {"content-type": "application/json"}},
                       {"json": {"inputs": [[1.0, 2.0]]}},
                       {"json": {"x": [[1.0]]}},
                       {"content": b'{"inputs": [[' + b",".join([b"NaN"] * 784) + b"]]}",
                        "headers": {"content-type": "application/json"}},
                       {"content": b"abc", "headers": {"content-type": "application/octet-stream"}},
                       {"content": rows(1, 0).tobytes(),
                        "headers": {"content-type": "application/octet-stream", "x-shape": "3,784"}}):
            r = await client.post("/predict", **kwargs)
            assert r.status_code == 400, (kwargs.keys(), r.text)
            assert r.json()["error"]
        r = await client.post("/predict", json={"inputs": rows(1, 0).tolist()})
        assert r.status_code == 200  # still serving


async def test_raw_bodies_media_type_and_dtype(anyio_backend):
    """A media type is case-insensitive (RFC 9110), so "Application/Octet-Stream" is a raw body, not bad JSON; an
    x-dtype other than float32 is refused, where its bytes read as float32 would have been answered as other rows."""
    async with service() as (app, client):
        x = rows(1, 0)
        for headers in ({"content-type": "Application/Octet-Stream"},
                        {"content-type": "application/octet-stream; charset=binary", "x-dtype": "float32"}):
            r = await client.post("/predict", content=x.tobytes(), headers=headers)
            assert r.status_code == 200, (headers, r.text)
            probs = np.frombuffer(r.content, np.float32).reshape(1, 10)
            np.testing.assert_allclose(probs, reference(x), rtol=1e-4, atol=1e-6)
        for dtype, body in (("float64", x.astype(np.float64).tobytes()), ("float16", rows(4, 1).astype(np.float16)),
                            ("no-such-type", x.tobytes())):
            r = await client.post("/predict", content=bytes(body),
                                  headers={"content-type": "application/octet-stream", "x-dtype": dtype})
            assert r.status_code == 400, (dtype, r.text)
            assert f"got x-dtype '{dtype}'" in r.json()["error"]
        assert app.state.batcher.statistics().submitted == 2


@pytest.mark.parametrize("raw", [False, True], ids=["json", "raw"])
async def test_more_rows_than_a_batch_takes_is_400(anyio_backend, raw):
    async with service(max_batch_size=4) as (app, client):
        for n, code in ((4, 200), (5, 400)):
            x = rows(n, n)
            if raw:
                r = await client.post("/predict", content=x.tobytes(),
                                      headers={"content-type": "application/octet-stream"})
            else:
                r = await client.post("/predict", json={"inputs": x.tolist()})
            assert r.status_code == code, r.text
        assert r.json()["error"] == ("5 rows in one request, at most 4 are taken (the batcher's max_batch_size): "
                                     "split the request")
        assert app.state.batcher.statistics().submitted == 1  # the refused request never reached the batcher


# httpx's ASGI transport leaves the client's body generator unfinished when the app answers before reading it all
# (the point here); trio's async-generator hooks report that as an unraisable ResourceWarning
@pytest.mark.filterwarnings("ignore:Exception ignored in. <async_generator object AsyncIteratorByteStream"
                            ":pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("raw", [False, True], ids=["json", "raw"])
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_a_body_far_larger_than_a_batch_is_413_unread(anyio_backend, raw, chunked):
    """A body far over what max_batch_size rows take is refused from its Content-Length before it is read, or as it
    streams in when it has none (chunked): a client cannot make the service hold an arbitrarily large body."""
    async with service(max_batch_size=4) as (app, client):
        sent = []
        size = 64 << 20  # 64 MiB: over 4 x (4 rows of 784 float32 values), and over 1 MiB, as JSON too

        async def chunks():
            for _ in range(size >> 16):
                sent.append(1 << 16)
                yield b"1" * (1 << 16)

        headers = {"content-type": "application/octet-stream" if raw else "application/json"}
        if chunked:
            r = await client.post("/predict", content=chunks(), headers=headers)
        else:
            r = await client.post("/predict", content=b"1" * size, headers=headers)
        assert r.status_code == 413, r.text
        assert "split the request" in r.json()["error"]
        if chunked:  # it stopped reading soon after the limit (httpx's transport may buffer a chunk or two ahead)
            assert sum(sent) < 8 << 20, sum(sent)
        assert app.state.batcher.statistics().submitted == 0
        r = await client.post("/predict", json={"inputs": rows(1, 1).tolist()})  # and it still serves
        assert r.status_code == 200, r.text


async def test_rows_the_batcher_refuses_are_400(anyio_backend):
    """A ValueError of Batcher.run (here: a batcher taking fewer rows than the body check allows) is the client's
    to fix: 400 with the batcher's message, not 500."""
    async with service(max_batch_size=8) as (app, client):
        serving = app.state.batcher
        app.state.batcher = ga.Batcher(app.state.session, 1, max_batch_size=2)
        try:
            r = await client.post("/predict", json={"inputs": rows(3, 0).tolist()})
            assert r.status_code == 400, r.text
            assert "max_batch_size" in r.json()["error"]
        finally:
            await app.state.batcher.aclose()
            app.state.batcher = serving


@pytest.mark.parametrize("value, shown", [("0.5", '"0.5"'), (True, "true"), (None, "null"), ({"v": 1}, '{"v": 1}')],
                         ids=["string", "bool", "null", "object"])
async def test_json_values_must_be_numbers(anyio_backend, value, shown):
    async with service() as (app, client):
        row = rows(1, 0)[0].tolist()
        row[7] = value
        for inputs in ([row], row):  # rows, or one bare row
            r = await client.post("/predict", json={"inputs": inputs})
            assert r.status_code == 400, r.text
            assert f"row 0 holds {shown}, which is not a JSON number" in r.json()["error"]
        assert app.state.batcher.statistics().submitted == 0


@pytest.mark.parametrize("inputs, message", [
    ([], "got no rows"),
    ([[0.5] * 783], "row 0 has 783 values, expected 784 numbers"),
    ([[0.5] * 784, 0.5], "row 1 has float, expected 784 numbers"),
    ([[[0.5] * 784]], "row 0 has 1 values, expected 784 numbers"),
    ([[10 ** 400] * 784], "inputs must be finite numbers"),
], ids=["empty", "short-row", "ragged", "too-deep", "huge-int"])
async def test_json_rows_must_have_the_right_shape(anyio_backend, inputs, message):
    async with service() as (app, client):
        r = await client.post("/predict", json={"inputs": inputs})
        assert r.status_code == 400, r.text
        assert message in r.json()["error"]
        x = rows(1, 0)
        r = await client.post("/predict", json={"inputs": [int(v) for v in (x[0] > 0.5)]})  # ints are numbers
        assert r.status_code == 200, r.text


async def test_the_third_request_fails_with_503(anyio_backend):
    faults = {"geasync.twin.faults": "graph_id=1,kind=fail_run,nth=3"}
    async with service(session_options=faults) as (app, client):
        codes = []
        for i in range(5):
            codes.append((await client.post("/predict", json={"inputs": rows(1, i).tolist()})).status_code)
        assert codes == [200, 200, 503, 200, 200]
        assert (await client.get("/health")).status_code == 200
        stats = (await client.get("/stats")).json()
        assert stats["session"]["failed"] == 1 and stats["batcher"]["failed"] == 1


async def test_a_dropped_callback_times_out_and_shows_in_health(anyio_backend):
    faults = {"geasync.twin.faults": "graph_id=1,kind=drop_callback,nth=2"}
    async with service(session_options=faults, request_timeout=0.3, abandon_after=0.2) as (app, client):
        r = await client.post("/predict", json={"inputs": rows(1, 0).tolist()})
        assert r.status_code == 200
        r = await client.post("/predict", json={"inputs": rows(1, 1).tolist()})
        assert r.status_code == 504, r.text
        r = await client.post("/predict", json={"inputs": rows(1, 2).tolist()})
        assert r.status_code == 200  # the session keeps serving
        health = (await client.get("/health")).json()
        assert health == {"status": "degraded", "abandoned": 1}, health
        stats = (await client.get("/stats")).json()
        assert stats["session"]["abandoned"] == 1 and stats["batcher"]["cancelled"] == 1


async def test_a_broken_session_fails_health(anyio_backend):
    """Once GE stopped the session's RunGraphAsync queue every request gets 503 for good: /health must stop
    saying "ok" (it did, as the session is not closed), or a load balancer keeps sending traffic there."""
    if ga.current_backend() != "twin":
        pytest.skip("twin fault injection")
    async with service() as (app, client):
        codes = [(await client.post("/predict", json={"inputs": rows(1, 0).tolist()})).status_code]
        ga.twin.inject_fault(app.state.session, 1, "fail_prerun", nth=1)
        for i in range(1, 3):
            codes.append((await client.post("/predict", json={"inputs": rows(1, i).tolist()})).status_code)
        assert codes == [200, 503, 503]
        r = await client.get("/health")
        assert r.status_code == 503 and r.json()["status"] == "broken", r.text
        assert "RunGraphAsync queue" in r.json()["error"]
        assert (await client.get("/stats")).status_code == 200


async def test_closed_session_is_503(anyio_backend):
    async with service() as (app, client):
        app.state.session.close()
        r = await client.post("/predict", json={"inputs": rows(1, 0).tolist()})
        assert r.status_code == 503, r.text
        assert (await client.get("/health")).status_code == 503


async def test_a_client_that_disconnects_cancels_its_request(anyio_backend):
    faults = {"geasync.twin.faults": "graph_id=1,kind=delay_run,nth=1,delay=0.3"}
    async with service(session_options=faults) as (app, client):
        body = b'{"inputs": [' + b",".join([b"0.5"] * 784) + b"]}"
        sent = []
        gone = anyio.Event()

        async def receive():
            if not sent:
                sent.append(1)
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/predict", "raw_path": b"/predict", "query_string": b"",
                 "root_path": "", "headers": [(b"content-type", b"application/json")], "client": ("t", 1),
                 "server": ("svc", 80), "state": {}}
        async with anyio.create_task_group() as tg:
            tg.start_soon(app, scope, receive, send)
            batcher = app.state.batcher
            while batcher.statistics().running == 0:
                await anyio.sleep(0.005)
            gone.set()  # the client goes away mid-run
        st = batcher.statistics()
        assert st.cancelled == 1 and st.completed == 0, st
        assert app.state.disconnects == 1
        r = await client.post("/predict", json={"inputs": rows(1, 0).tolist()})
        assert r.status_code == 200


async def test_metrics_and_instances(anyio_backend):
    pytest.importorskip("prometheus_client")
    async with service(instances=2) as (app, client):
        assert isinstance(app.state.batcher.graph, ga.GraphPool)
        r = await client.post("/predict", json={"inputs": rows(3, 0).tolist()})
        assert r.status_code == 200
        text = (await client.get("/metrics")).text
        assert "geasync_runs_completed_total" in text and "geasync_batch_size_rows_bucket" in text, text


async def test_freeze_gc_freezes_what_startup_made_and_thaws_at_shutdown(anyio_backend):
    """``freeze_gc=True`` (what ``python app.py`` passes): full collections skip the objects alive once the service
    has started, and shutdown hands them back to the collector; the default leaves the collector alone."""
    import gc

    before = gc.get_freeze_count()
    async with service() as (app, client):
        assert gc.get_freeze_count() == before
    async with service(freeze_gc=True) as (app, client):
        assert gc.get_freeze_count() > before
        assert not any(o is app for o in gc.get_objects())  # frozen: in no generation the collector walks
        r = await client.post("/predict", json={"inputs": rows(1, 0).tolist()})
        assert r.status_code == 200
    assert gc.get_freeze_count() == 0
    assert any(o is app for o in gc.get_objects())

@pytest.mark.timeout(120, method="thread")
def test_the_service_runs_with_one_command():
    """The README's command (uvicorn, uvloop when installed) serves /health and /predict, and stops cleanly."""
    import os
    import socket
    import subprocess
    import time

    pytest.importorskip("uvicorn")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, PORT=str(port))
    env.pop("PYTHONWARNINGS", None)
    proc = subprocess.Popen([sys.executable, str(ROOT / "examples" / "http_service" / "app.py")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "the service did not start"
                time.sleep(0.1)
        assert r.status_code == 200 and r.json()["status"] == "ok"
        x = rows(1, 0)
        r = httpx.post(f"http://127.0.0.1:{port}/predict", json={"inputs": x.tolist()}, timeout=10)
        assert r.status_code == 200, r.text
        np.testing.assert_allclose(np.array(r.json()["outputs"]), reference(x), rtol=1e-4, atol=1e-6)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err[-3000:]
