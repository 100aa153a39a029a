"""Adversarial tests, session 57: the public surfaces around runs (options, Tensor interop, the Batcher).

- ``ge.exec.frozenInputIndexes`` given to ``load_graph`` (or ``add_graph``, or the session): GE parses it when the
  graph is loaded and fails the load on a malformed value (GraphNode::ParseFrozenInputIndex); the twin accepted any
  value, so a typo passed every test on the twin and failed on the NPU.
- ``np.asarray(tensor, dtype=other, copy=False)``: numpy 2's ``__array__`` protocol says copy=False never copies;
  Tensor.__array__ converted (a copy) silently.
- geasync.serve's HTTP entry: a JSON number past the input's dtype (an integer of 400 digits for float32) raised
  OverflowError out of the handler (a 500 with a traceback) instead of answering 400.
- the example HTTP service: a JSON number past float32 (1e39) raised numpy's overflow RuntimeWarning in the handler
  (an exception out of it under ``-W error``, as in this test suite; a log line per request otherwise) before
  the finite check answered 400.
- ``Batcher(closed_session, 1)`` failed naming ``Session.is_graph_need_rebuild()``, a call its user never made.
"""

from __future__ import annotations

import asyncio
import sys
import warnings

import numpy as np
import pytest

import geasync as ga

FROZEN = "ge.exec.frozenInputIndexes"


def _mlp_session() -> ga.Session:
    s = ga.Session()
    s.add_graph(1, ga.samples.mlp())
    return s


@pytest.mark.parametrize("value, why", [
    ("2a", "not a digit"),
    ("0,b,8", "not a digit"),
    ("-1", "not a digit"),
    ("0,1", "2 field"),
    ("0;", "not an int32"),
    ("1 2", "not an int32"),
    ("99999999999", "not an int32"),
    ("0,99999999999999999999999999,8", "uint64"),
    ("0,0,4", "address cannot be zero"),
    ("0,64,0", "length cannot be zero"),
])
def test_a_malformed_frozen_input_option_fails_the_load(value, why):
    with _mlp_session() as s:
        with pytest.raises(ga.GeError, match=why) as info:
            s.load_graph(1, {FROZEN: value})
        message = str(info.value)
        assert "Session.load_graph(graph_id=1)" in message and FROZEN in message and repr(value) in message
        # nothing was loaded: the graph still runs (loaded on demand), as after any failed load
        (y,) = s.run_graph(1, [np.ones((2, 784), np.float32)])
        assert y.shape == (2, 10)


@pytest.mark.parametrize("value", ["", "0", "0;1", " 1", "1000", "0,1111,10;1,64,4", "0001"])
def test_well_formed_frozen_input_values_load(value):
    with _mlp_session() as s:
        s.load_graph(1, {FROZEN: value})
        x = np.random.default_rng(0).random((3, 784), dtype=np.float32)
        (y,) = s.run_graph(1, [x])
        assert y.shape == (3, 10) and np.isfinite(y.numpy()).all()


def test_a_malformed_frozen_input_option_of_the_graph_fails_its_load():
    # GE reads the option from the graph's options too (LoadGraph merges its own under them)
    with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp(), {FROZEN: "x"})
        with pytest.raises(ga.GeError, match="not a digit"):
            s.load_graph(1)


def test_array_protocol_copy_false_refuses_a_dtype_conversion():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = ga.Tensor.from_numpy(x)
    with pytest.raises(ValueError, match="copy=False"):
        np.asarray(t, dtype=np.float64, copy=False)
    with pytest.raises(ValueError, match="copy=False"):
        t.__array__(np.float64, copy=False)
    # what needs no copy is still a view; a conversion that may copy still converts
    assert np.shares_memory(np.asarray(t, copy=False), x)
    assert np.shares_memory(np.asarray(t, dtype=np.float32, copy=False), x)
    converted = np.asarray(t, dtype=np.float64)
    assert converted.dtype == np.float64 and np.array_equal(converted, x)
    copied = np.array(t, copy=True)
    assert not np.shares_memory(copied, x) and np.array_equal(copied, x)


def test_a_batcher_on_a_closed_session_names_the_batcher():
    s = _mlp_session()
    s.close()
    with pytest.raises(ga.SessionClosedError, match=r"Batcher\(graph_id=1\)") as info:
        ga.Batcher(s, 1)
    assert "is_graph_need_rebuild" not in str(info.value)


def test_a_closed_stream_passed_to_a_session_call_names_that_call():
    x = np.ones((1, 784), np.float32)
    with _mlp_session() as s:
        st = ga.Stream()
        st.close()
        calls = [
            ("Session.run_graph_with_stream_async(graph_id=1)", lambda: s.run_graph_with_stream_async(1, st, [x])),
            ("Session.load_graph(graph_id=1)", lambda: s.load_graph(1, stream=st)),
            ("Session.register_external_allocator()", lambda: s.register_external_allocator(st, object())),
        ]
        for context, call in calls:
            with pytest.raises(ga.SessionClosedError, match="the stream is closed") as info:
                call()
            assert context in str(info.value), str(info.value)
        # refused before GE saw it: the graph's run mode is still free
        (y,) = s.run_graph(1, [x])
        assert y.shape == (1, 10)


def test_prometheus_collector_refuses_a_session_or_batcher_of_another_type():
    # they were taken, then registering the collector and every scrape failed with "'...' object has no attribute
    # 'statistics'" from inside collect()
    pytest.importorskip("prometheus_client")
    from geasync.prometheus import GeasyncCollector

    with _mlp_session() as s:
        with pytest.raises(TypeError, match=r"^GeasyncCollector: session must be a geasync.Session, got Batcher"):
            GeasyncCollector(ga.Batcher(s, 1))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"batchers=\.\.\.\): 'mlp' must map to a geasync.Batcher, got int"):
            GeasyncCollector(s, batchers={"mlp": 1})  # type: ignore[dict-item]


def test_a_json_number_past_the_dtype_is_400_in_the_serve_deployment():
    pytest.importorskip("ray.serve")
    from conftest import serve_post_json

    huge = b"1" + b"0" * 400
    row = b"[" + b",".join([huge] + [b"0.5"] * 783) + b"]"
    by_name, by_position, good = serve_post_json([b'{"inputs": {"x": [' + row + b"]}}", b'{"inputs": [[' + row + b"]]}",
                                                  b'{"inputs": {"x": [' + row.replace(huge, b"0.5") + b"]}}"])
    for r in (by_name, by_position):
        assert r.status_code == 400, r.body[:300]
        assert b"input 'x' holds a number out of the range of float32" in r.body
    assert good.status_code == 200, good.body[:300]


@pytest.mark.parametrize("options", [{"ge.exec.deviceId\0junk": "0"}, {"ge.graphRunMode": "1\0"},
                                     {"ge.x": "\ud800"}, {"\udcff": "1"}])
def test_an_option_with_a_nul_or_a_lone_surrogate_is_refused_naming_the_call(options):
    # a NUL cut the key or value short in GE's C strings (another option, silently); a lone surrogate raised
    # UnicodeEncodeError from inside the native call
    with pytest.raises(ValueError, match=r"^Session\(\): options: option .* NUL character or a lone surrogate"):
        ga.Session(options)
    with _mlp_session() as s:
        with pytest.raises(ValueError, match=r"^Session.add_graph\(\): options: option .* NUL"):
            s.add_graph(2, ga.samples.mlp(), options)
        with pytest.raises(ValueError, match=r"^Session.load_graph\(\): options: option .* NUL"):
            s.load_graph(1, options)


@pytest.mark.parametrize("shape", [[1.5], "12", None, [True, 2], [np.float32(2)], 3])
def test_from_device_refuses_a_shape_that_is_not_ints(shape):
    # int() took 1.5 as 1 and "12" as (1, 2): a device Tensor of another size than the caller's memory, silently
    with ga.Session():
        owner = ga.Tensor.from_numpy(np.zeros(4, np.float32)).to_device()
        with pytest.raises(TypeError, match=r"^Tensor.from_device: shape must be a sequence of ints"):
            ga.Tensor.from_device(owner.address, shape, np.float32, owner=owner)
        for good in ([4], (2, 2), np.array([4]), [np.int64(4)], ()):
            t = ga.Tensor.from_device(owner.address, good, np.float32, owner=owner)
            assert t.placement == "device" and t.shape == tuple(int(d) for d in good)


def test_a_json_number_past_float32_is_400_in_the_example_http_service_without_a_warning():
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("starlette")
    from conftest import ROOT, make_mlp

    sys.path.insert(0, str(ROOT / "examples" / "http_service"))
    from app import create_app

    async def main() -> list:
        app = create_app(make_mlp().SerializeToString())
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://svc") as client:
                big = await client.post("/predict", json={"inputs": [[1e39] + [0.5] * 783]})
                good = await client.post("/predict", json={"inputs": [[0.5] * 784]})
                return [big, good]

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as under python -W error (and this suite's filterwarnings)
        big, good = asyncio.run(main())
    assert big.status_code == 400, big.text[:300]
    assert big.json()["error"] == "inputs must be finite numbers"
    assert good.status_code == 200, good.text[:300]


def test_a_graph_pool_on_a_closed_session_names_the_pool():
    s = ga.Session()
    s.add_graph(1, ga.samples.mlp())
    s.close()
    with pytest.raises(ga.SessionClosedError, match=r"in GraphPool.add: the session is closed"):
        ga.GraphPool.add(s, ga.samples.mlp(), graph_ids=[3])  # named Session.add_graph_clone(graph_id=3)
    with pytest.raises(ga.SessionClosedError, match=r"in GraphPool: the session is closed"):
        ga.GraphPool(s, [1])  # was made, to fail every request


def test_cli_run_says_an_input_file_is_not_npy_rather_than_pickled(tmp_path):
    # numpy takes any file that is neither .npy nor .npz for a pickle: "This file contains pickled (object) data"
    import os
    import subprocess

    (tmp_path / "mlp.onnx").write_bytes(ga.samples.mlp_bytes())
    (tmp_path / "x.csv").write_text("0.5,0.5\n")
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    r = subprocess.run([sys.executable, "-m", "geasync", "run", "mlp.onnx", "--input", "x=x.csv"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2, r.stderr
    assert "cannot load 'x.csv' as a .npy array: it is not a .npy file (write one with np.save" in r.stderr
    assert "pickled" not in r.stderr


def test_wrong_typed_batching_arguments_are_refused():
    with _mlp_session() as s:
        with pytest.raises(ValueError, match=r"^Batcher: max_delay must be a number of seconds >= 0, got True"):
            ga.Batcher(s, 1, max_delay=True)  # was taken as 1 s
    pytest.importorskip("ray.serve")
    from conftest import MLP_PATH
    from geasync.serve import _GeasyncModel

    class InProcess(_GeasyncModel):
        def __del__(self) -> None:  # Serve's async one, never awaited here
            pass

    for bad in (0, -1, "8", 2.0, True):
        with pytest.raises(ValueError, match=r"^GeasyncModel: max_batch_size must be a positive int"):
            InProcess(str(MLP_PATH), backend="twin", max_batch_size=bad)
