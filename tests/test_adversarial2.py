"""A second adversary's findings, kept as regression tests: hostile external-data locations (a FIFO, a directory),
stream arguments the native side would have wrapped or mis-read (out-of-range addresses, NaN / inf / str timeouts,
negative device ids), and argument errors that did not say which call they came from. Anything that could hang runs
under a timeout, so a regression fails its test, not the suite."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import anyio
import numpy as np
import pytest

import geasync as ga
from conftest import add_model

onnx = pytest.importorskip("onnx")
from onnx import external_data_helper, numpy_helper  # noqa: E402


# --- 1. external data: a location that is not a regular file -----------------------------------------------------

def _model_with_external_weight(directory: str, location: str) -> str:
    """An Add of ``x`` and an initializer ``w`` whose bytes are said to be in ``location``; returns the model's path."""
    model = add_model((2, 2))
    # the second input becomes a constant held as external data
    model.graph.initializer.append(numpy_helper.from_array(np.ones((2, 2), np.float32), "b"))
    external_data_helper.set_external_data(model.graph.initializer[0], location=location)
    model.graph.initializer[0].ClearField("raw_data")
    path = os.path.join(directory, "model.onnx")
    onnx.save(model, path)
    return path


def _from_onnx_within(path: str, seconds: float) -> BaseException:
    """Graph.from_onnx(path) in a daemon thread: the exception it raised, or a test failure if it hangs."""
    outcome: list[BaseException] = []

    def load() -> None:
        try:
            ga.Graph.from_onnx(path)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"Graph.from_onnx({path!r}) hung for {seconds} s")
    assert outcome, "Graph.from_onnx accepted a model whose external data is not a regular file"
    return outcome[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_external_data_in_a_fifo_is_refused_instead_of_hanging(tmp_path):
    # Opening a FIFO for reading waits for a writer, forever: the model names one beside itself
    os.mkfifo(tmp_path / "weights.bin")
    path = _model_with_external_weight(str(tmp_path), "weights.bin")
    exc = _from_onnx_within(path, 10.0)
    assert isinstance(exc, ValueError)
    message = str(exc)
    assert "Graph.from_onnx(" in message and "model.onnx" in message  # the call and the model
    assert "'b'" in message and "'weights.bin'" in message and "not a regular file" in message


def test_external_data_naming_a_directory_is_refused_clearly(tmp_path):
    (tmp_path / "sub").mkdir()
    path = _model_with_external_weight(str(tmp_path), "sub")
    exc = _from_onnx_within(path, 10.0)
    assert isinstance(exc, ValueError)
    assert "'sub' is not a regular file" in str(exc) and "Graph.from_onnx(" in str(exc)


def test_external_data_outside_the_model_directory_names_the_call(tmp_path):
    path = _model_with_external_weight(str(tmp_path), "../outside.bin")
    with pytest.raises(ValueError, match=r"Graph\.from_onnx\(.*model\.onnx'\): tensor 'b': external data location "
                                         r"'\.\./outside\.bin' is not a file inside the model's directory"):
        ga.Graph.from_onnx(path)


def test_external_data_in_a_regular_file_still_loads(tmp_path):
    (tmp_path / "weights.bin").write_bytes(np.full((2, 2), 3, np.float32).tobytes())
    path = _model_with_external_weight(str(tmp_path), "weights.bin")
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(path))
        (y,) = s.run_graph(1, [np.ones((2, 2), np.float32)])
        np.testing.assert_array_equal(y.numpy(), np.full((2, 2), 4, np.float32))


# --- 2. streams: addresses, timeouts and device ids the native side would have taken wrongly ----------------------

@pytest.mark.parametrize("address", [-1, -(2**63), 2**64, 2**64 + 12345])
def test_out_of_range_stream_addresses_are_refused_before_the_runtime(address):
    # cffi takes an int as a pointer modulo 2^64: 2^64 became a null stream, -1 the address 0xffff...ffff
    with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp())
        x = np.ones((1, 784), np.float32)
        with pytest.raises(ValueError, match=rf"Session\.run_graph_with_stream_async\(graph_id=1\): stream must be "
                                             rf"a stream's address .*got {address}"):
            s.run_graph_with_stream_async(1, address, [x])
        with pytest.raises(ValueError, match=r"Session\.load_graph\(graph_id=1\): stream"):
            s.load_graph(1, stream=address)
        with pytest.raises(ValueError, match=r"Session\.register_external_allocator\(\): stream"):
            s.register_external_allocator(address, ga.DeviceAllocator())
        # nothing reached GE: the graph has no run mode yet, so a synchronous run still works
        (y,) = s.run_graph(1, [x])
        assert y.shape == (1, 10)


@pytest.mark.parametrize("timeout, error, text", [
    (float("nan"), ValueError, "got NaN"),
    ("1", TypeError, "got '1'"),
    (True, TypeError, "got True"),
])
def test_stream_synchronize_refuses_timeouts_that_are_not_seconds(timeout, error, text):
    # before: NaN raised "cannot convert float NaN to integer", "1" an OverflowError ("1" * 1000 is a long string)
    with ga.Stream() as st:
        with pytest.raises(error, match=rf"Stream\.synchronize\(\): timeout must be a number of seconds or None, "
                                        rf"{text}"):
            st.synchronize(timeout=timeout)


@pytest.mark.parametrize("timeout", [float("inf"), 1e10, np.float32(2.0), 5])
def test_stream_synchronize_takes_long_and_numpy_timeouts(timeout):
    # before: inf raised OverflowError and 1e10 s "does not fit '32-bit int'" (ACL's timeout is int32 milliseconds)
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.samples.mlp())
        (y,) = s.run_graph_with_stream_async(1, st, [np.ones((1, 784), np.float32)])
        st.synchronize(timeout=timeout)
        assert st.query()
        assert y.to_host().numpy().shape == (1, 10)


def test_negative_device_ids_other_than_the_default_are_refused():
    # -1 means the default device; -5 used to be taken for it silently
    with pytest.raises(ValueError, match=r"Stream\(\): device_id must be a device number >= 0, or -1"):
        ga.Stream(-5)
    t = ga.Tensor.from_numpy(np.ones(3, np.float32))
    with pytest.raises(ValueError, match=r"Tensor\.to_device\(\): device_id must be a device number >= 0, or -1"):
        t.to_device(-5)
    with ga.Stream(-1) as st:
        assert not st.closed
    np.testing.assert_array_equal(t.to_device(-1).to_host().numpy(), np.ones(3, np.float32))


# --- 3. argument errors name the call they came from --------------------------------------------------------------

@pytest.mark.parametrize("call, api", [
    (lambda s: s.run_graph(np.int64(1), []), "Session.run_graph()"),
    (lambda s: s.add_graph("1", ga.samples.mlp()), "Session.add_graph()"),
    (lambda s: s.add_graph_clone(1.0, ga.samples.mlp()), "Session.add_graph_clone()"),
    (lambda s: s.remove_graph(None), "Session.remove_graph()"),
    (lambda s: s.compile_graph("1"), "Session.compile_graph()"),
    (lambda s: s.graph_inputs(1.5), "Session.graph_inputs()"),
    (lambda s: s.run_graph_with_stream_async(b"1", 0, []), "Session.run_graph_with_stream_async()"),
])
def test_a_graph_id_of_the_wrong_type_names_the_call(call, api):
    with ga.Session() as s:
        with pytest.raises(TypeError) as info:
            call(s)
    assert str(info.value).startswith(f"{api}: graph_id must be an int, got ")
    assert "int(graph_id)" in str(info.value)  # what to do


@pytest.mark.parametrize("call, api", [
    (lambda s: s.add_graph(1, ga.samples.mlp(), {"ge.graphKey": 1}), "Session.add_graph(): options"),
    (lambda s: s.load_graph(1, ["x"]), "Session.load_graph(): options"),
])
def test_options_of_the_wrong_type_name_the_call(call, api):
    with ga.Session() as s:
        with pytest.raises(TypeError, match="^" + api.replace("(", r"\(").replace(")", r"\)")):
            call(s)
    with pytest.raises(TypeError, match=r"^Session\(\): options keys and values must be str"):
        ga.Session({"ge.exec.precision_mode": 1})  # type: ignore[dict-item]


@pytest.mark.anyio
async def test_bad_graph_ids_of_async_runs_raise_at_the_call_on_every_loop(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp())
        x = np.ones((1, 784), np.float32)
        with pytest.raises(ValueError, match=r"^Session\.run_graph_async\(\): graph_id must fit in uint32, got -1"):
            s.run_graph_async(-1, [x])  # raises before any coroutine exists: nothing to await, nothing leaked
        with pytest.raises(TypeError, match=r"^Session\.run_graph_async\(\): graph_id must be an int, got float"):
            s.run_graph_async(1.0, [x])
        with pytest.raises(TypeError, match=r"^Batcher: graph must be a graph id"):
            ga.Batcher(s, np.int64(1))
        (y,) = await s.run_graph_async(1, [x])  # the session is unaffected
        assert y.shape == (1, 10)
        stats = s.statistics()
        assert (stats.submitted, stats.completed, stats.failed) == (1, 1, 0)


# --- 4. the Batcher takes what Session runs take, and says what is wrong with a request -------------------------

class _Sub(np.ndarray):
    pass


@pytest.mark.anyio
async def test_batcher_takes_numpy_subclasses_as_session_runs_do(anyio_backend, tmp_path):
    # before: "inputs[0] must be a numpy.ndarray or a geasync.Tensor, got memmap" (a memmap is an ndarray)
    x = np.random.default_rng(1).random((3, 784), dtype=np.float32)
    mapped = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.float32, shape=x.shape)
    mapped[:] = x
    async with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp())
        s.add_graph(2, ga.samples.mlp())
        (want,) = s.run_graph(2, [x])
        async with ga.Batcher(s, 1, max_batch_size=8) as batcher:
            got = {}

            async def one(name, a):
                (y,) = await batcher.run([a])
                got[name] = y.numpy().copy()

            async with anyio.create_task_group() as tg:  # concurrent: the joined-batch path as well as the lone one
                for name, a in [("sub", x.view(_Sub)), ("memmap", mapped), ("plain", x), ("sub2", x.view(_Sub))]:
                    tg.start_soon(one, name, a)
        assert sorted(got) == ["memmap", "plain", "sub", "sub2"]
        for name, y in got.items():
            np.testing.assert_allclose(y, want.numpy(), rtol=1e-6, atol=1e-7, err_msg=name)


@pytest.mark.anyio
async def test_batcher_reports_a_missing_batch_dim_as_a_shape_error(anyio_backend):
    # before: x[0] (784 values) was refused as "784 rows exceed max_batch_size=8"
    x = np.ones((2, 784), np.float32)
    async with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp())
        async with ga.Batcher(s, 1, max_batch_size=8) as batcher:
            with pytest.raises(ga.InputError, match=r"Batcher\.run\(graph_id=1\): input 0 \('x'\) has rank 1, the "
                                                    r"graph declares \['N', 784\]") as info:
                batcher.run([x[0]])
            assert info.value.input_name == "x"
            with pytest.raises(ValueError, match=r"9 rows exceed max_batch_size=8"):  # a fitting shape, too many rows
                batcher.run([np.ones((9, 784), np.float32)])
            (y,) = await batcher.run([x])
            assert y.shape == (2, 10)


def test_a_batcher_over_a_graph_the_session_lacks_names_the_batcher():
    # before: "GeSession::CompileGraph failed ... in Session.compile_graph(graph_id=99)", a call the user never made
    with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp())
        with pytest.raises(ga.GeError, match=r"in Batcher\(graph_id=99\): graph_id=99 does not exist in this session "
                                             r"\(add it with add_graph\)"):
            ga.Batcher(s, 99)
        assert s.is_graph_need_rebuild(1)  # nothing was compiled on the way


# --- 5. the command line -----------------------------------------------------------------------------------------

def test_cli_run_refuses_an_npz_archive_as_an_input_with_a_usage_error(tmp_path):
    # before: np.load returned an NpzFile, which reached Session.run_graph and ended in a TypeError traceback
    model = tmp_path / "mlp.onnx"
    model.write_bytes(ga.samples.mlp().model_bytes)
    np.savez(tmp_path / "x.npz", x=np.zeros((1, 784), np.float32))
    r = subprocess.run([sys.executable, "-m", "geasync", "run", str(model), "--input", f"x={tmp_path / 'x.npz'}"],
                       capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert r.returncode == 2, r.stderr  # a bad command line, not a failed run
    assert "Traceback" not in r.stderr
    assert "is a .npz archive (arrays: x), not one array; save each input with np.save" in r.stderr

