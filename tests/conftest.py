"""Shared fixtures: model builders (onnx.helper), a fresh Session, and live-counter leak checks."""

from __future__ import annotations

import gc
import pathlib
import sys

import numpy as np
import pytest

import geasync as ga

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "models"))

import onnx  # noqa: E402  (a test dependency: pip install .[test])
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from make_models import make_mlp  # noqa: E402

MLP_PATH = ROOT / "examples" / "models" / "mlp.onnx"

# The event loops every async test runs on (anyio's pytest plugin): asyncio, asyncio with uvloop, trio.
BACKENDS = [
    pytest.param(("asyncio", {}), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
    pytest.param(("trio", {}), id="trio"),
]


@pytest.fixture(params=BACKENDS)
def anyio_backend(request):
    return request.param


def make_model(nodes, inputs, outputs, initializers=(), opset=17) -> "onnx.ModelProto":
    """A ModelProto from node list and (name, elem_type, shape) tuples for inputs/outputs."""
    graph = helper.make_graph(
        nodes,
        "test",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in initializers],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def add_model(shape=(1, 16)) -> "onnx.ModelProto":
    """The tiny Add of two float32 tensors used by latency tests and benchmarks."""
    return make_model(
        [helper.make_node("Add", ["a", "b"], ["c"], name="add")],
        [("a", TensorProto.FLOAT, list(shape)), ("b", TensorProto.FLOAT, list(shape))],
        [("c", TensorProto.FLOAT, list(shape))],
    )


def serve_post_json(bodies: list) -> list:
    """Posts each JSON body to geasync.serve's GeasyncModel on the example MLP, called in process (no Ray cluster),
    and returns the responses. Needs ray[serve] (callers importorskip it)."""
    import asyncio

    from starlette.requests import Request

    from geasync.serve import _GeasyncModel

    class InProcess(_GeasyncModel):
        def __del__(self) -> None:  # Serve awaits the async one; close() below does its work
            pass

    def request(body: bytes) -> Request:
        async def receive() -> dict:
            return {"type": "http.request", "body": body, "more_body": False}

        return Request({"type": "http", "method": "POST", "path": "/", "query_string": b"",
                        "headers": [(b"content-type", b"application/json")]}, receive)

    async def main() -> list:
        model = InProcess(str(MLP_PATH), backend="twin")
        try:
            return [await model(request(body)) for body in bodies]
        finally:
            await model.close()

    return asyncio.run(main())


def gc_collect_harder() -> None:
    for _ in range(4):
        gc.collect()


def live() -> dict:
    gc_collect_harder()
    return ga.live_counters()


@pytest.fixture
def mlp_model():
    return make_mlp()


@pytest.fixture
def session():
    with ga.Session() as s:
        yield s


@pytest.fixture
def no_leaks():
    """Asserts that the test leaves the native live counters where it found them."""
    before = live()
    yield
    after = live()
    leaked = {k: (before[k], after[k]) for k in before if after[k] != before[k]}
    assert not leaked, f"native objects leaked (before, after): {leaked}"


__all__ = ["make_model", "add_model", "make_mlp", "MLP_PATH", "live", "gc_collect_harder", "TensorProto", "helper",
           "numpy_helper"]
