"""Adversarial tests, part 6: out-of-range option values (the session's memory limit, the twin's fault
specifications), the ways a newcomer hands a model to ``Graph.from_onnx`` (file objects, text-mode files,
directories, model bytes passed as str), and what each says.

Every refusal is a Python exception naming the call and what to pass instead; nothing reaches cffi or the runtime
with a value they would truncate or choke on.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

import geasync as ga

from conftest import add_model

A = np.ones((1, 16), np.float32)


def _run_add(options=None):
    with ga.Session(options) as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        return s.run_graph(1, [A, A])[0].numpy().copy()


# --- geasync.max_memory_bytes -----------------------------------------------------------------------------------

def test_a_memory_limit_beyond_uint64_limits_nothing_instead_of_overflowing():
    # int('9' * 23) does not fit the twin's uint64: it used to raise a bare OverflowError from cffi
    assert _run_add({"geasync.max_memory_bytes": "9" * 23}).sum() == 32.0


@pytest.mark.parametrize("value", ["-1", "0", "1e3", "nan", "", "lots"])
def test_a_bad_memory_limit_names_the_session_the_option_and_the_form(value):
    with pytest.raises(ValueError, match=r"^Session\(\): option geasync\.max_memory_bytes must be a positive "
                                         r"number of bytes, got .*pass an int as a str"):
        ga.Session({"geasync.max_memory_bytes": value})


@pytest.mark.parametrize("value", [8 << 30, -1, 1.5, None, True])
def test_an_option_value_that_is_no_str_says_to_pass_a_str(value):
    with pytest.raises(TypeError, match=r"^Session\(\): options keys and values must be str.*pass str\(value\)"):
        ga.Session({"geasync.max_memory_bytes": value})


# --- geasync.twin.faults and geasync.twin.inject_fault ---------------------------------------------------------

@pytest.mark.parametrize("entry, field", [
    ("graph_id=99999999999999999999,kind=fail_run", "graph_id"),
    ("graph_id=-1,kind=fail_run", "graph_id"),
    ("graph_id=1,kind=fail_run,nth=99999999999999999999", "nth"),
    ("graph_id=1,kind=fail_run,status=99999999999999999999", "status"),
    ("graph_id=1,kind=delay_run,delay=inf", "delay"),
    ("graph_id=1,kind=delay_run,delay=nan", "delay"),
    ("graph_id=1,kind=delay_run,delay=1e300", "delay"),
])
def test_out_of_range_fault_fields_are_refused_naming_the_entry_and_field(entry, field):
    # these used to escape as OverflowError ("int too big to convert") or as float-to-int conversion errors,
    # or (status) to be truncated silently to another status
    with pytest.raises(ValueError, match=rf"^bad geasync\.twin\.faults entry '{entry}': {field} must be"):
        ga.Session({"geasync.twin.faults": entry})
    assert ga.live_counters()["sessions"] == 0  # the refused session was closed, not left behind


@pytest.mark.parametrize("kwargs, field", [
    (dict(nth=2**70), "nth"),
    (dict(status=2**70), "status"),
    (dict(status="13"), "status"),
    (dict(kind="delay_run", delay=float("nan")), "delay"),
    (dict(kind="delay_run", delay=float("inf")), "delay"),
    (dict(kind="delay_run", delay=1e300), "delay"),
    (dict(kind="delay_run", delay="0.1"), "delay"),
])
def test_inject_fault_refuses_out_of_range_values_naming_the_call(session, kwargs, field):
    session.add_graph(1, ga.Graph.from_onnx(add_model()))
    kind = kwargs.pop("kind", "fail_run")
    with pytest.raises(ValueError, match=rf"^geasync\.twin\.inject_fault\(graph_id=1\): {field} must be"):
        ga.twin.inject_fault(session, 1, kind, **kwargs)
    # nothing was armed: the next run goes through
    assert session.run_graph(1, [A, A])[0].numpy().sum() == 32.0


def test_inject_fault_refuses_a_graph_id_beyond_uint32(session):
    with pytest.raises(ValueError, match=r"^geasync\.twin\.inject_fault\(graph_id=1099511627776\): graph_id must"):
        ga.twin.inject_fault(session, 2**40, "fail_run")


def test_in_range_fault_values_still_arm(session):
    session.add_graph(1, ga.Graph.from_onnx(add_model()))
    ga.twin.inject_fault(session, 1, "fail_run", nth=1, status=-1)  # -1: GE's FAILED as a signed constant
    with pytest.raises(ga.GeError, match="status 4294967295"):
        session.run_graph(1, [A, A])
    ga.twin.inject_fault(session, 1, "delay_run", nth=1, delay=np.float64(0.001))
    assert session.run_graph(1, [A, A])[0].numpy().sum() == 32.0


# --- Graph.from_onnx sources --------------------------------------------------------------------------------

def test_from_onnx_takes_a_binary_file_object(tmp_path):
    path = tmp_path / "add.onnx"
    path.write_bytes(add_model().SerializeToString())
    with open(path, "rb") as f:
        g = ga.Graph.from_onnx(f)
    assert g.name == "add.onnx" and [i.name for i in g.inputs] == ["a", "b"]
    g2 = ga.Graph.from_onnx(io.BytesIO(path.read_bytes()))  # no file behind it: no name, no external data
    with ga.Session() as s:
        s.add_graph(1, g)
        s.add_graph(2, g2)
        assert s.run_graph(1, [A, A])[0].numpy().sum() == s.run_graph(2, [A, A])[0].numpy().sum() == 32.0


def test_from_onnx_file_object_reads_external_data_beside_its_file(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from conftest import make_model

    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1, 16], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", "64")):
        w.external_data.add(key=key, value=value)
    model = make_model([helper.make_node("Add", ["a", "w"], ["c"])], [("a", TensorProto.FLOAT, [1, 16])],
                       [("c", TensorProto.FLOAT, [1, 16])])
    model.graph.initializer.append(w)
    (tmp_path / "w.bin").write_bytes(np.full(16, 2, np.float32).tobytes())
    onnx.save(model, tmp_path / "m.onnx")
    with open(tmp_path / "m.onnx", "rb") as f, ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(f))
        assert s.run_graph(1, [A])[0].numpy().tolist() == [[3.0] * 16]
    (tmp_path / "w.bin").unlink()
    with open(tmp_path / "m.onnx", "rb") as f, pytest.raises(ValueError, match=r"Graph\.from_onnx\(.*m\.onnx.*w\.bin"):
        ga.Graph.from_onnx(f)


def test_from_onnx_text_mode_file_says_to_open_it_in_binary_mode(tmp_path):
    path = tmp_path / "add.onnx"
    path.write_bytes(b"not read as text")
    with open(path) as f, pytest.raises(TypeError, match=r"^Graph\.from_onnx\(\): .*binary mode \(open\(path, 'rb'"):
        ga.Graph.from_onnx(f)


def test_from_onnx_directory_keeps_the_os_error_type_and_names_the_call(tmp_path):
    with pytest.raises(IsADirectoryError, match=r"Graph\.from_onnx\(.*\): Is a directory: pass the path of an ONNX"):
        ga.Graph.from_onnx(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"Graph\.from_onnx\(.*nope\.onnx'\): No such file"):
        ga.Graph.from_onnx(tmp_path / "nope.onnx")


def test_from_onnx_model_bytes_passed_as_str_say_so_briefly():
    text = add_model().SerializeToString().decode("latin-1")  # what reading a model in text mode gives
    with pytest.raises(ValueError, match=r"^Graph\.from_onnx\(.*\.\.\.'\): not a file path .*pass model bytes as "
                                         r"bytes") as info:
        ga.Graph.from_onnx(text)
    assert len(str(info.value)) < 300  # the model is not echoed whole


# --- Batcher.run inputs ----------------------------------------------------------------------------------------

@pytest.mark.anyio
async def test_a_batcher_input_that_is_no_array_names_the_graph_the_input_and_the_conversion():
    async with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp())
        async with ga.Batcher(s, 1, max_batch_size=8) as b:
            # as Session.run_graph_async says it (it used to be "Batcher.run: inputs[0] must be ..., got list")
            with pytest.raises(TypeError, match=r"^Batcher\.run\(graph_id=1\): inputs\[0\] \('x'\) must be a "
                                                r"geasync\.Tensor or a numpy\.ndarray, got list \(pass "
                                                r"np\.asarray\(value, dtype=np\.float32\)\)"):
                await b.run([[[0.0] * 784]])
            (y,) = await b.run([np.zeros((1, 784), np.float32)])  # the batcher still serves
            assert y.numpy().shape == (1, 10)


def test_external_data_location_with_a_nul_byte_is_refused_naming_the_tensor(tmp_path):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from conftest import make_model

    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1, 16], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "w.bin\0/../../etc/passwd"), ("offset", "0"), ("length", "64")):
        w.external_data.add(key=key, value=value)
    model = make_model([helper.make_node("Add", ["a", "w"], ["c"])], [("a", TensorProto.FLOAT, [1, 16])],
                       [("c", TensorProto.FLOAT, [1, 16])])
    model.graph.initializer.append(w)
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    # it said only "Graph.from_onnx(...): embedded null byte"
    with pytest.raises(ValueError, match=r"^Graph\.from_onnx\(.*m\.onnx'\): tensor 'w': external data location "
                                         r"'w\.bin\\x00.*' is not a file inside the model's directory"):
        ga.Graph.from_onnx(tmp_path / "m.onnx")


# --- copy and pickle ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_a_stream_is_neither_copied_nor_pickled_and_stays_usable(how):
    import copy
    import pickle

    do = {"copy": copy.copy, "deepcopy": copy.deepcopy, "pickle": pickle.dumps}[how]
    with ga.Session() as s, ga.Stream() as st:
        # a copy owned the same ACL stream: collecting it destroyed the stream, and the original's close() then
        # failed with "is not a live stream"
        with pytest.raises(TypeError, match=r"^a Stream cannot be .*: .*ACL stream"):
            do(st)
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        (y,) = s.run_graph_with_stream_async(1, st, [A, A])
        st.synchronize()
        assert y.to_host().numpy().sum() == 32.0


def test_a_graph_pickles_and_copies_as_a_fresh_graph_of_the_same_model():
    import copy
    import pickle

    g = ga.Graph.from_onnx(add_model())
    with ga.Session() as s:
        s.add_graph(1, g)  # parsed and marked added: it used to fail to pickle ("cannot pickle '_cffi_backend...'")
        for i, other in enumerate([pickle.loads(pickle.dumps(g)), copy.copy(g), copy.deepcopy(g)], start=2):
            assert other.model_bytes == g.model_bytes and other.inputs == g.inputs
            s.add_graph(i, other)  # not marked as added, unlike the original
            assert s.run_graph(i, [A, A])[0].numpy().sum() == 32.0


def test_tensors_pickle_by_value_on_the_host_and_refuse_clearly_on_the_device():
    import copy
    import pickle

    big = np.arange(64 * 1024, dtype=np.float32).reshape(1, -1)  # 256 KiB: an output left in runtime memory
    model = add_model(shape=big.shape)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        (y,) = s.run_graph(1, [big, big])
        for other in (pickle.loads(pickle.dumps(y)), copy.deepcopy(y), copy.copy(y)):
            assert other.placement == "host" and np.array_equal(other.numpy(), big * 2)
    d = ga.Tensor.from_numpy(A).to_device()
    for do in (pickle.dumps, copy.deepcopy):
        with pytest.raises(TypeError, match=r"^a device Tensor cannot be pickled .*tensor\.to_host\(\) first"):
            do(d)
    d2 = copy.copy(d)  # the same device memory, kept alive by the same owner
    del d
    assert d2.to_host().numpy().sum() == 16.0


# --- the command line ----------------------------------------------------------------------------------------

def _cli(*args, cwd):
    import subprocess
    import sys

    # cwd away from the repository: run from its root, `-m geasync` would import the unbuilt source tree (a fresh
    # clone installed without -e), as tests/test_cli.py's runs avoid too
    return subprocess.run([sys.executable, "-m", "geasync", *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd)


def test_cli_bench_refuses_an_endless_measurement_and_a_batch_the_machine_cannot_hold(tmp_path):
    path = tmp_path / "mlp.onnx"
    path.write_bytes(ga.samples.mlp().model_bytes)
    r = _cli("bench", str(path), "--seconds", "inf", cwd=tmp_path)  # ran for ever
    assert r.returncode == 2 and "--seconds: must be a finite number > 0, got inf" in r.stderr, r.stderr
    r = _cli("bench", str(path), "--batch", str(10**11), cwd=tmp_path)  # a MemoryError traceback, exit 1
    assert r.returncode == 2, r.stderr
    assert "input 'x' of shape [100000000000, 784] at --batch 100000000000 needs" in r.stderr
    assert "use a smaller --batch" in r.stderr and "Traceback" not in r.stderr


# --- GraphPool errors name the pool ---------------------------------------------------------------------------

@pytest.mark.anyio
async def test_a_graph_pool_request_error_names_the_pool_and_the_instance():
    async with ga.Session() as s:
        pool = ga.GraphPool.add(s, ga.samples.mlp(), graph_ids=[1, 2])
        # it named only Session.run_graph_async, a call the caller never made
        with pytest.raises(ga.InputError, match=r"^GraphPool\.run_graph_async\(graph_ids=\[1, 2\]\) through "
                                                r"Session\.run_graph_async\(graph_id=[12]\): unknown input name\(s\) "
                                                r"'X'; missing input\(s\) 'x'") as info:
            await pool.run_graph_async({"X": np.ones((1, 784), np.float32)})
        assert info.value.input_name is None and info.value.graph_id in (1, 2)
        with pytest.raises(ga.InputTypeError, match=r"^GraphPool\.run_graph_async\(graph_ids=\[1, 2\]\) through "
                                                    r"Session\.run_graph_async\(graph_id=[12]\): input 0 \('x'\): "
                                                    r"dtype float64"):
            await pool.run_graph_async([np.ones((1, 784))])
        (y,) = await pool.run_graph_async([np.ones((1, 784), np.float32)])
        assert y.numpy().shape == (1, 10)
    closed = r"in GraphPool\.run_graph_async\(graph_ids=\[1, 2\]\) through Session\.run_graph_async\(graph_id=[12]\): "
    with pytest.raises(ga.SessionClosedError, match=closed + "the session is closed"):
        await pool.run_graph_async([np.ones((1, 784), np.float32)])


@pytest.mark.parametrize("kwargs", [dict(max_in_flight=0), dict(max_in_flight="8"), dict(abandon_after=float("nan")),
                                    dict(abandon_after=-1), dict(slow_after="1"), dict(slow_after=float("inf"))])
def test_bad_session_keywords_name_the_session(kwargs):
    (name,) = kwargs
    with pytest.raises(ValueError, match=rf"^Session\(\): {name} must be a positive"):
        ga.Session(**kwargs)
    assert ga.live_counters()["sessions"] == 0
