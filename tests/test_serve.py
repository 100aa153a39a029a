"""geasync on Ray Serve (geasync.serve), on a local Ray cluster the tests start themselves: loopback only, 2 CPUs,
every wait bounded. Two replicas serve concurrent requests through a DeploymentHandle and over HTTP; a replica
killed mid-load is restarted by Serve and every request either succeeds or fails with an error the caller can
retry; a replica's shutdown leaves nothing pinned."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time

import numpy as np
import pytest

import geasync as ga

from conftest import MLP_PATH

ray = pytest.importorskip("ray", reason="Ray Serve is in the test extra: pip install '.[test]'")
serve = pytest.importorskip("ray.serve")
httpx = pytest.importorskip("httpx")

from geasync.serve import GeasyncModel, build_app  # noqa: E402

# Ray's own modules warn on import and at shutdown (deprecations in its dependencies): not ours to fix.
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::ResourceWarning"),
              pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
              pytest.mark.timeout(240)]

# What a caller may see when its replica dies under it: each says "retry", none is a wrong answer.
RETRYABLE = tuple(getattr(ray.exceptions, name) for name in
                  ("RayActorError", "ActorDiedError", "ActorUnavailableError", "TaskCancelledError")
                  if hasattr(ray.exceptions, name))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # Ray's workers start in the driver's working directory and import from it: not the repository root, whose
    # source tree a non-editable install does not build in place
    here = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("ray"))
    # Serve kills (and fails serve.start) a proxy actor not ready within 5 s; on a loaded 2-core machine starting its
    # worker process can take longer. The controller inherits this from the driver's environment.
    timeout = "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S"
    previous = os.environ.get(timeout)
    os.environ[timeout] = "60"
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 namespace="geasync-serve-tests")
    finally:
        os.chdir(here)
        if previous is None:
            os.environ.pop(timeout, None)
        else:
            os.environ[timeout] = previous
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="module")
def reference():
    """The MLP's outputs computed in this process, to check every answer a replica gives."""
    rng = np.random.default_rng(7)
    xs = [rng.random((1 + i % 3, 784), dtype=np.float32) for i in range(16)]
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(MLP_PATH))
        ys = [s.run_graph(1, [x])[0].numpy().copy() for x in xs]
    return xs, ys


def _deploy(name: str, replicas: int, **kwargs):
    app = GeasyncModel.options(num_replicas=replicas, ray_actor_options={"num_cpus": 0.5}).bind(
        MLP_PATH.read_bytes(), **kwargs)
    return serve.run(app, name=name, route_prefix=f"/{name}", blocking=False)


def _replica_actor_names(app: str) -> list[str]:
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if a["name"].startswith(f"SERVE_REPLICA::{app}#"))


def _wait_running(app: str, replicas: int, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = serve.status().applications.get(app)
        if status is not None and status.status == "RUNNING":
            states = status.deployments["GeasyncModel"].replica_states
            if states.get("RUNNING", 0) == replicas and len(_replica_actor_names(app)) == replicas:
                return
        time.sleep(0.25)
    raise AssertionError(f"{app}: {replicas} replicas not RUNNING after {timeout} s: {serve.status()}")


def test_two_replicas_serve_handle_and_http(cluster, reference):
    xs, ys = reference
    handle = _deploy("two", 2, max_batch_size=16, max_delay=0.002)
    _wait_running("two", 2)

    async def through_handle():
        return await asyncio.gather(*(handle.infer.remote([xs[i % len(xs)]]) for i in range(96)))

    results = asyncio.run(through_handle())
    for i, (y,) in enumerate(results):
        np.testing.assert_allclose(y, ys[i % len(xs)], rtol=1e-5, atol=1e-6)

    async def through_http():
        async with httpx.AsyncClient(base_url=cluster, timeout=30) as client:
            json_calls = [client.post("/two", json={"inputs": {"x": xs[i].tolist()}}) for i in range(8)]
            raw_calls = [client.post("/two", content=xs[i].tobytes(),
                                     headers={"content-type": "application/octet-stream",
                                              "x-shape": ",".join(map(str, xs[i].shape))}) for i in range(8)]
            bad = client.post("/two", json={"inputs": {"x": [[1.0, 2.0]]}})  # wrong width
            unknown = client.post("/two", json={"inputs": {"nope": [[1.0]]}})
            return await asyncio.gather(*json_calls), await asyncio.gather(*raw_calls), await bad, await unknown

    json_answers, raw_answers, bad, unknown = asyncio.run(through_http())
    for i, r in enumerate(json_answers):
        assert r.status_code == 200, r.text
        np.testing.assert_allclose(np.asarray(r.json()["outputs"]["probs"], np.float32), ys[i], rtol=1e-5, atol=1e-6)
    for i, r in enumerate(raw_answers):
        assert r.status_code == 200, r.text
        y = np.frombuffer(r.content, dtype=r.headers["x-dtype"]).reshape(
            tuple(int(d) for d in r.headers["x-shape"].split(",")))
        np.testing.assert_allclose(y, ys[i], rtol=1e-5, atol=1e-6)
    assert bad.status_code == 400 and "784" in bad.text, bad.text
    assert unknown.status_code == 400 and "nope" in unknown.text, unknown.text

    # both replicas took part: their completed counts add up to every run (batched runs count once)
    seen: dict[str, dict] = {}
    deadline = time.monotonic() + 30
    while len(seen) < 2 and time.monotonic() < deadline:
        stats = handle.statistics.remote().result()
        seen[stats["replica"]] = stats
    assert len(seen) == 2, seen
    assert all(s["session"]["completed"] > 0 for s in seen.values()), seen
    serve.delete("two")


def test_killed_replica_is_restarted_and_no_request_is_lost(cluster, reference):
    xs, ys = reference
    handle = _deploy("kill", 2, max_batch_size=8, max_delay=0.002)
    _wait_running("kill", 2)
    victim = _replica_actor_names("kill")[0]

    async def load():
        async def one(i):
            await asyncio.sleep(0.002 * i)  # spread over ~0.8 s, so the kill lands mid-load
            return await handle.infer.remote({"x": xs[i % len(xs)]})  # by name

        tasks = [asyncio.ensure_future(one(i)) for i in range(400)]
        await asyncio.sleep(0.3)
        ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
        return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 120)

    results = asyncio.run(load())
    ok = failed = 0
    for i, r in enumerate(results):
        if isinstance(r, BaseException):
            assert isinstance(r, RETRYABLE), f"request {i}: not a retryable error: {r!r}"
            failed += 1
        else:
            np.testing.assert_allclose(r[0], ys[i % len(xs)], rtol=1e-5, atol=1e-6)
            ok += 1
    assert ok + failed == len(results) and ok > 0

    _wait_running("kill", 2)  # Serve replaced the killed replica
    assert victim not in _replica_actor_names("kill")
    after = [handle.infer.remote([xs[i]]).result(timeout_s=60) for i in range(8)]
    for i, (y,) in enumerate(after):
        np.testing.assert_allclose(y, ys[i], rtol=1e-5, atol=1e-6)
    serve.delete("kill")


def test_replica_shutdown_leaves_nothing_pinned(cluster, reference, tmp_path):
    xs, ys = reference
    report = tmp_path / "shutdown.json"
    handle = _deploy("down", 1, max_batch_size=8, shutdown_report=str(report))
    _wait_running("down", 1)

    async def burst():
        return await asyncio.gather(*(handle.infer.remote([xs[i % len(xs)]]) for i in range(64)))

    assert len(asyncio.run(burst())) == 64
    serve.delete("down")  # Serve calls the replica's __del__, which closes the session
    deadline = time.monotonic() + 60
    while not report.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    final = json.loads(report.read_text())
    session, live = final["session"], final["live"]
    assert session["in_flight"] == 0 and session["waiting"] == 0 and session["pinned_bytes"] == 0, session
    assert session["completed"] >= 1 and session["failed"] == 0, session
    assert live["sessions"] == 0 and live["pending_completions"] == 0, live


def test_build_app_checks_its_arguments():
    with pytest.raises(ValueError, match="model"):
        build_app({})
    with pytest.raises(ValueError, match="max_batch"):
        build_app({"model": str(MLP_PATH), "max_batch": 3})
    assert build_app({"model": str(MLP_PATH), "max_batch_size": 4}) is not None


def test_a_raw_body_is_recognised_whatever_the_case_of_its_media_type():
    """The deployment's HTTP entry called in process (no cluster): "Application/Octet-Stream" was read as JSON and
    refused with 400."""
    from starlette.requests import Request

    from geasync.serve import _GeasyncModel

    class InProcess(_GeasyncModel):
        def __del__(self) -> None:  # Serve awaits the async one; here close() below does its work
            pass

    def request(body: bytes, content_type: str) -> Request:
        async def receive() -> dict:
            return {"type": "http.request", "body": body, "more_body": False}

        headers = [(b"content-type", content_type.encode()), (b"x-shape", b"1,784")]
        return Request({"type": "http", "method": "POST", "path": "/", "headers": headers, "query_string": b""},
                       receive)

    async def main() -> list:
        model = InProcess(str(MLP_PATH), backend="twin")
        try:
            x = np.zeros((1, 784), np.float32).tobytes()
            return [await model(request(x, ct)) for ct in
                    ("application/octet-stream", "Application/Octet-Stream", "application/octet-stream; a=b")]
        finally:
            await model.close()

    answers = asyncio.run(main())
    assert [r.status_code for r in answers] == [200, 200, 200], [r.body[:200] for r in answers]
    assert len({r.body for r in answers}) == 1


def test_a_body_over_max_body_bytes_is_refused_with_413_before_it_is_read_whole():
    """In process (no cluster): a declared Content-Length over the limit is refused unread, a chunked body as soon
    as it streams past the limit; a body within it is served."""
    from starlette.requests import Request

    from geasync.serve import _GeasyncModel

    class InProcess(_GeasyncModel):
        def __del__(self) -> None:
            pass

    row = np.zeros((1, 784), np.float32).tobytes()
    read: list[int] = []

    def request(chunks: list[bytes], length: bool) -> Request:
        parts = iter(chunks)

        async def receive() -> dict:
            chunk = next(parts, b"")
            read.append(len(chunk))
            return {"type": "http.request", "body": chunk, "more_body": bool(chunk)}

        headers = [(b"content-type", b"application/octet-stream"), (b"x-shape", b"-1,784")]
        if length:
            headers.append((b"content-length", str(sum(map(len, chunks))).encode()))
        return Request({"type": "http", "method": "POST", "path": "/", "headers": headers, "query_string": b""},
                       receive)

    async def main() -> list:
        with pytest.raises(ValueError, match="max_body_bytes"):
            InProcess(str(MLP_PATH), backend="twin", max_body_bytes=0)
        model = InProcess(str(MLP_PATH), backend="twin", max_body_bytes=4 * len(row))
        try:
            answers = [await model(request([row * 2], True))]
            read.clear()
            answers.append(await model(request([row * 100], True)))
            unread = list(read)
            answers.append(await model(request([row] * 100, False)))
            return [answers, unread, len(read)]
        finally:
            await model.close()

    answers, unread, chunks_read = asyncio.run(main())
    assert [r.status_code for r in answers] == [200, 413, 413], [r.body[:200] for r in answers]
    assert unread == [] and chunks_read == 5  # refused from its length; the chunked one after 5 of 100 chunks
    assert b"max_body_bytes" in answers[1].body
