"""Adversarial tests, session 56: what a new user's ordinary numpy arrays and hostile values do.

- numpy arrays that are C-contiguous but not aligned to their element size (``np.frombuffer`` at an odd offset, a
  field of a packed record array): GE copies host inputs, so it takes them; the twin used to refuse them at run time
  with "input 0 is not aligned to its element size".
- Tile with repeats whose product with the dim wraps int64: it used to return an empty or a too-short output.
- a null stream handed to ``run_graph_with_stream_async``: it used to fail as a RegisterExternalAllocator error the
  caller never made, and to fix the graph's run mode.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

import geasync as ga

from conftest import TensorProto, helper, make_model

F32, F64, I64 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64


def _unaligned(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``a`` whose data starts one byte past an aligned address."""
    raw = np.zeros(a.nbytes + 1 + 64, np.uint8)
    start = (-raw.ctypes.data) % 64 + 1  # one byte past a 64-byte boundary: misaligned for every itemsize > 1
    out = np.frombuffer(raw.data, dtype=a.dtype, count=a.size, offset=start).reshape(a.shape)
    out[...] = a
    assert not out.flags.aligned and out.flags.c_contiguous
    return out


def _mul_add_model(elem: int, shape=(3, 5)):
    # y = a * b + a: reads both inputs elementwise (a kernel that indexed a misaligned input would fault or misread)
    return make_model([helper.make_node("Mul", ["a", "b"], ["t"]), helper.make_node("Add", ["t", "a"], ["y"])],
                      [("a", elem, list(shape)), ("b", elem, list(shape))], [("y", elem, list(shape))])


@pytest.mark.parametrize("elem,dtype", [(F32, np.float32), (F64, np.float64), (I64, np.int64)])
def test_unaligned_numpy_inputs_run_as_their_aligned_copies(elem, dtype):
    model = _mul_add_model(elem)
    rng = np.random.default_rng(56)
    a = (rng.standard_normal((3, 5)) * 10).astype(dtype)
    b = (rng.standard_normal((3, 5)) * 10).astype(dtype)
    (want,) = ReferenceEvaluator(model).run(None, {"a": a, "b": b})
    ua, ub = _unaligned(a), _unaligned(b)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        np.testing.assert_array_equal(s.run_graph(1, [ua, ub])[0].numpy(), want)
        np.testing.assert_array_equal(s.run_graph(1, [ga.Tensor.from_numpy(ua), b])[0].numpy(), want)
        np.testing.assert_array_equal(s.run_graph(1, {"a": a, "b": ub})[0].numpy(), want)
        np.testing.assert_array_equal(ua, a)  # the inputs themselves are left as they were


def test_unaligned_inputs_through_async_runs_and_the_stream_mode():
    model = _mul_add_model(F32)
    a = np.arange(15, dtype=np.float32).reshape(3, 5) - 7
    b = np.linspace(-2, 2, 15, dtype=np.float32).reshape(3, 5)
    (want,) = ReferenceEvaluator(model).run(None, {"a": a, "b": b})
    ua, ub = _unaligned(a), _unaligned(b)

    async def main(s):
        outs = await asyncio.gather(*[s.run_graph_async(1, [ua, ub]) for _ in range(4)])
        return [o[0].numpy() for o in outs]

    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.Graph.from_onnx(model))
        s.add_graph(2, ga.Graph.from_onnx(model))
        for got in asyncio.run(main(s)):
            np.testing.assert_array_equal(got, want)
        (y,) = s.run_graph_with_stream_async(2, st, [ua, ub])
        st.synchronize()
        np.testing.assert_array_equal(y.to_host().numpy(), want)


def test_a_packed_record_field_is_taken_as_an_input():
    # a field of a packed record array: strided (copied by geasync); its reshaped copy of one record column is the
    # case users hit with np.frombuffer over a binary file's payload
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, [6])], [("y", F32, [6])])
    rec = np.zeros(6, dtype=[("tag", "u1"), ("v", "<f4")])
    rec["v"] = np.arange(6) - 3.0
    payload = rec.tobytes()
    column = np.frombuffer(payload, dtype=np.float32, count=1, offset=1)  # record 0's value, misaligned
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        (y,) = s.run_graph(1, [rec["v"]])
        (want,) = ReferenceEvaluator(model).run(None, {"x": rec["v"].copy()})
        np.testing.assert_array_equal(y.numpy(), want)
        s.add_graph(2, ga.Graph.from_onnx(make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, [1])],
                                                     [("y", F32, [1])])))
        assert s.run_graph(2, [column])[0].numpy().tolist() == [0.0]


# --- Tile repeats that wrap int64 -------------------------------------------------------------------------------

def _tile_model():
    return make_model([helper.make_node("Tile", ["x", "r"], ["y"])], [("x", F32, [4]), ("r", I64, [1])],
                      [("y", F32, None)])


@pytest.mark.parametrize("repeats", [2**62, 2**62 + 1, 2**62 + 2, 2**61 + 1, 2**63 - 1])
def test_tile_repeats_past_the_element_limit_are_refused_not_wrapped(repeats):
    # 4 * 2^62 wrapped to 0 (an empty output), 4 * (2^62 + 1) to 4 (the input once)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(_tile_model()))
        with pytest.raises(ga.GeError, match=r"op Tile\).*repeats make dim 0 of .* more than 2\^40 long"):
            s.run_graph(1, [np.arange(4, dtype=np.float32), np.array([repeats], np.int64)])


def test_tile_still_repeats_within_the_limit():
    model = _tile_model()
    x = np.arange(4, dtype=np.float32)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        for r in (0, 1, 3):
            reps = np.array([r], np.int64)
            (want,) = ReferenceEvaluator(model).run(None, {"x": x, "r": reps})
            np.testing.assert_array_equal(s.run_graph(1, [x, reps])[0].numpy(), want)


# --- a null stream ----------------------------------------------------------------------------------------------

def test_a_null_stream_names_the_call_and_fixes_no_run_mode():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, [2, 3])], [("y", F32, [2, 3])])
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        with pytest.raises(ValueError, match=r"^Session\.run_graph_with_stream_async\(graph_id=1\): stream is null "
                                             r"\(0\); pass a geasync\.Stream"):
            s.run_graph_with_stream_async(1, 0, [x])
        # the refused call was no run: the graph may still take another mode
        (want,) = ReferenceEvaluator(model).run(None, {"x": x})
        np.testing.assert_array_equal(s.run_graph(1, [x])[0].numpy(), want)


# --- SpaceToDepth / DepthToSpace dims grown by the block ----------------------------------------------------------

def _space_model(op: str, blocksize: int):
    return make_model([helper.make_node(op, ["x"], ["y"], blocksize=blocksize)], [("x", F32, None)],
                      [("y", F32, None)])


def test_space_to_depth_channels_past_the_element_limit_are_refused_not_wrapped():
    # an empty input may carry any dim: 2^30 channels times blocksize^2 = 2^40 wrapped to 0 channels
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(_space_model("SpaceToDepth", 2**20)))
        with pytest.raises(ga.GeError, match=r"op SpaceToDepth\).*blocksize 1048576 makes dim 1 of .* more than "
                                             r"2\^40 long"):
            s.run_graph(1, [np.zeros((1, 2**30, 0, 0), np.float32)])


@pytest.mark.parametrize("op,shape", [("SpaceToDepth", (2, 3, 4, 6)), ("DepthToSpace", (2, 12, 3, 2)),
                                      ("SpaceToDepth", (1, 2**30, 0, 0)), ("DepthToSpace", (0, 8, 5, 7))])
def test_space_depth_ops_still_match_the_reference(op, shape):
    blocksize = 2 if 0 not in shape else 2 if op == "DepthToSpace" else 1
    model = _space_model(op, blocksize)
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        (y,) = s.run_graph(1, [x])
        assert y.shape == want.shape
        np.testing.assert_array_equal(y.numpy(), want)


# --- HTTP bodies nested past the interpreter's stack ---------------------------------------------------------------

_DEEP = b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"  # ~200 KB: json.loads raises RecursionError


def test_a_deeply_nested_json_body_is_400_in_the_serve_deployment():
    """geasync.serve's HTTP entry, called in process (no cluster): the RecursionError escaped as a 500."""
    pytest.importorskip("ray.serve")
    from conftest import serve_post_json

    good = b'{"inputs": {"x": [[' + b",".join([b"0.5"] * 784) + b"]]}}"
    deep, good = serve_post_json([_DEEP, good])
    assert deep.status_code == 400, deep.body[:300]
    assert b"the body must be JSON" in deep.body
    assert good.status_code == 200, good.body[:300]


def test_a_deeply_nested_json_body_is_400_in_the_example_http_service():
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("starlette")
    from conftest import ROOT, make_mlp

    sys.path.insert(0, str(ROOT / "examples" / "http_service"))
    from app import create_app

    async def main() -> list:
        app = create_app(make_mlp().SerializeToString())
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://svc") as client:
                deep = await client.post("/predict", content=_DEEP, headers={"content-type": "application/json"})
                good = await client.post("/predict", json={"inputs": [[0.5] * 784]})
                return [deep, good]

    deep, good = asyncio.run(main())
    assert deep.status_code == 400, deep.text[:300]
    assert "expected a JSON body" in deep.json()["error"]
    assert good.status_code == 200, good.text[:300]


# --- Prometheus labels that are not str -----------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,match", [
    ({"labels": {"replica": 5}}, r"^GeasyncCollector\(labels=\.\.\.\): label names and values must be str, got "
                                 r"'replica': 5 \(pass str\(value\)\)"),
    ({"labels": {7: "x"}}, r"^GeasyncCollector\(labels=\.\.\.\): label names and values must be str, got 7: 'x'"),
    ({"batchers": {3: None}}, r"^GeasyncCollector\(batchers=\.\.\.\): batcher names .* must be str, got 3"),
    ({"prefix": None}, r"^GeasyncCollector\(prefix=\.\.\.\): prefix must be a str, got None"),
])
def test_prometheus_collector_refuses_what_every_scrape_would_fail_on(kwargs, match):
    # an int label value was taken, then every scrape failed in prometheus_client's exposition with
    # "'int' object has no attribute 'replace'"
    prometheus_client = pytest.importorskip("prometheus_client")
    from geasync.prometheus import GeasyncCollector

    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, [2])], [("y", F32, [2])])
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        s.run_graph(1, [np.ones(2, np.float32)])
        with pytest.raises(TypeError, match=match):
            GeasyncCollector(s, **kwargs)
        registry = prometheus_client.CollectorRegistry()
        registry.register(GeasyncCollector(s, labels={"replica": "5"}))
        assert registry.get_sample_value("geasync_runs_completed_total", {"graph": "1", "replica": "5"}) == 1


# --- python -m geasync run: arguments that used to end in a traceback or a wrong message ------------------------------

def _cli(*args: str, cwd) -> "subprocess.CompletedProcess[str]":
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    return subprocess.run([sys.executable, "-m", "geasync", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env=env)


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli56")
    (d / "mlp.onnx").write_bytes(ga.samples.mlp_bytes())
    np.save(d / "x.npy", np.random.default_rng(0).random((2, 784), dtype=np.float32))
    return d


@pytest.mark.parametrize("args,message", [
    (["--precision", "-1"], "argument --precision: must be >= 0, got -1"),
    (["-i", "x=x.npy"], "input 'x' is given twice; give each input once"),
    (["-o", "nowhere/out.npz"], "the directory"),
    (["-o", "adir.npz"], "is a directory; name an .npz file"),
])
def test_cli_run_refuses_bad_arguments_before_running(mlp_run, args, message):
    (mlp_run / "adir.npz").mkdir(exist_ok=True)
    r = _cli("run", "mlp.onnx", "-i", "x=x.npy", *args, cwd=mlp_run)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_cli_run_names_the_file_numpy_saved(mlp_run):
    # np.savez adds ".npz" to a name without it: the message named "out", the file was out.npz
    r = _cli("run", "mlp.onnx", "-i", "x.npy", "-o", "out", cwd=mlp_run)
    assert r.returncode == 0, r.stderr
    assert "saved 1 output(s) to out.npz: probs" in r.stdout
    with np.load(mlp_run / "out.npz") as saved:
        with ga.Session() as s:
            s.add_graph(1, ga.samples.mlp())
            np.testing.assert_array_equal(saved["probs"], s.run_graph(1, [np.load(mlp_run / "x.npy")])[0].numpy())


# --- an external allocator that hands out memory that is not device memory ---------------------------------------

class _Handing(ga.Allocator):
    """Hands out ``address`` (a callable: its result) and records the frees."""

    def __init__(self, address) -> None:
        self.address = address
        self.frees: list[int] = []

    def malloc(self, size: int) -> int:
        return self.address() if callable(self.address) else self.address

    def free(self, address: int) -> None:
        self.frees.append(address)


_HOST = np.zeros(64, np.float32)  # host memory: on the twin it is no device memory either


@pytest.mark.parametrize("address", [64, 4096, 2**63, lambda: _HOST.ctypes.data],
                         ids=["64", "4096", "2^63", "numpy-buffer"])
def test_an_allocator_address_outside_device_memory_fails_the_run_instead_of_crashing(address):
    # the twin wrote the run's output there: a segfault for the first three
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, [4])], [("y", F32, [4])])
    code = f"""
import numpy as np, geasync as ga, onnx
from test_adversary56 import _Handing, _HOST
model = onnx.load_from_string(bytes.fromhex({model.SerializeToString().hex()!r}))
alloc = _Handing({"lambda: _HOST.ctypes.data" if callable(address) else address})
with ga.Session() as s, ga.Stream() as st:
    s.add_graph(1, ga.Graph.from_onnx(model))
    s.register_external_allocator(st, alloc)
    try:
        s.run_graph_with_stream_async(1, st, [np.arange(4, dtype=np.float32)])
    except ga.GeError as exc:
        print("refused", exc.status, "|", exc)
    st.synchronize()
    s.unregister_external_allocator(st)
print("frees", len(alloc.frees))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=os.path.dirname(os.path.abspath(__file__)))
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "refused 1343225856 |" in r.stdout, r.stdout  # MEMALLOC_FAILED
    assert "which is not inside a live aclrtMalloc block large enough" in r.stdout
    assert "frees 1" in r.stdout  # the block it gave is handed back


def test_an_allocator_address_past_64_bits_is_refused_not_wrapped():
    # 2^64 + 64 was cast to the pointer 64
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, [4])], [("y", F32, [4])])
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.Graph.from_onnx(model))
        s.register_external_allocator(st, _Handing(2**64 + 64))
        with pytest.raises(ga.GeError) as ei:
            s.run_graph_with_stream_async(1, st, [np.arange(4, dtype=np.float32)])
        assert isinstance(ei.value.__cause__, ValueError)
        assert "_Handing.malloc() must return an address (0 <= int < 2**64), got 18446744073709551680" in str(
            ei.value.__cause__)
        s.unregister_external_allocator(st)
        # a good allocator on the same stream still runs
        s.register_external_allocator(st, ga.DeviceAllocator())
        (y,) = s.run_graph_with_stream_async(1, st, [np.arange(4, dtype=np.float32) - 2])
        st.synchronize()
        (want,) = ReferenceEvaluator(model).run(None, {"x": np.arange(4, dtype=np.float32) - 2})
        np.testing.assert_array_equal(y.to_host().numpy(), want)
        s.unregister_external_allocator(st)
