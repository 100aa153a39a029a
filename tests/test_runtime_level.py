"""GE's per-graph run-mode exclusivity (RunGraph vs RunGraphWithStreamAsync), as the twin reproduces it."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import geasync as ga
from conftest import add_model

UNSUPPORTED = 1343225956
FAILED = 4294967295
A = np.full((1, 16), 1.5, np.float32)

MODES = {
    "RunGraph": (lambda s, st, gid, ins: s.run_graph(gid, ins), UNSUPPORTED),
    "RunGraphWithStreamAsync": (lambda s, st, gid, ins: s.run_graph_with_stream_async(gid, st, list(ins)), FAILED),
}
PAIRS = [(a, b) for a in MODES for b in MODES]


def _run(mode, s, st, gid, inputs):
    outs = MODES[mode][0](s, st, gid, inputs)
    if mode == "RunGraphWithStreamAsync":
        st.synchronize()
        vals = [o.to_host().numpy().copy() for o in outs]
    else:
        vals = [o.numpy().copy() for o in outs]
    del outs
    return vals


def e10062(api, prev, gid):
    return f"Failed to call {api}. Reason: {prev} was already called for the graph (graph_id={gid})"


@pytest.mark.parametrize("first,second", PAIRS)
def test_mode_pairs(first, second):
    gid = 7
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(gid, ga.Graph.from_onnx(add_model()))
        (y,) = _run(first, s, st, gid, [A, A])
        np.testing.assert_array_equal(y, 2 * A)
        if first == second:
            (y,) = _run(second, s, st, gid, [A, A])  # same mode again: fine
            np.testing.assert_array_equal(y, 2 * A)
            return
        with pytest.raises(ga.GeError) as ei:
            _run(second, s, st, gid, [A, A])
        e = ei.value
        assert e.status == MODES[second][1], (e.status, e.status_name)
        assert e10062(second, first, gid) in e.error_message
        assert "mutually exclusive" in e.error_message
        assert "E10062" in e.error_message
        assert second in e.api_name
        # the first mode keeps working
        (y,) = _run(first, s, st, gid, [A, A])
        np.testing.assert_array_equal(y, 2 * A)


@pytest.mark.parametrize("first,second", [p for p in PAIRS if p[0] != p[1]])
def test_mode_conflict_is_execution_mode_error(first, second):
    """geasync exports ExecutionModeError(GeError) documented as the error for exactly this conflict."""
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        _run(first, s, st, 1, [A, A])
        with pytest.raises(ga.ExecutionModeError):
            _run(second, s, st, 1, [A, A])


@pytest.mark.parametrize("first,second", [p for p in PAIRS if p[0] != p[1]])
def test_mode_recorded_even_when_first_run_fails(first, second):
    if ga.current_backend() != "twin":
        pytest.skip("needs the twin's fault injection (a run that fails inside the runtime)")
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(3, ga.Graph.from_onnx(add_model()))
        ga.twin.inject_fault(s, 3, "fail_run")  # a run GE fails (bad inputs are refused before GE sees them)
        with pytest.raises(ga.GeError) as ei:
            _run(first, s, st, 3, [A, A])
        assert not isinstance(ei.value, ga.InputError) and "fault injected" in ei.value.error_message
        with pytest.raises(ga.GeError) as ei:
            _run(second, s, st, 3, [A, A])
        assert ei.value.status == MODES[second][1]
        assert e10062(second, first, 3) in ei.value.error_message
        (y,) = _run(first, s, st, 3, [A, A])
        np.testing.assert_array_equal(y, 2 * A)


@pytest.mark.parametrize("first,second", [p for p in PAIRS if p[0] != p[1]])
def test_compile_and_load_do_not_set_mode(first, second):
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        s.compile_graph(1)
        s.load_graph(1)
        (y,) = _run(second, s, st, 1, [A, A])  # the first *run* fixes the mode, not compile/load
        np.testing.assert_array_equal(y, 2 * A)
        with pytest.raises(ga.GeError) as ei:
            _run(first, s, st, 1, [A, A])
        assert e10062(first, second, 1) in ei.value.error_message


@pytest.mark.parametrize("first,second", [p for p in PAIRS if p[0] != p[1]])
def test_remove_and_add_resets_mode(first, second):
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(5, ga.Graph.from_onnx(add_model()))
        _run(first, s, st, 5, [A, A])
        gc.collect()
        s.remove_graph(5)
        s.add_graph(5, ga.Graph.from_onnx(add_model()))
        (y,) = _run(second, s, st, 5, [A, A])
        np.testing.assert_array_equal(y, 2 * A)
        with pytest.raises(ga.GeError) as ei:
            _run(first, s, st, 5, [A, A])
        assert ei.value.status == MODES[first][1]
        assert e10062(first, second, 5) in ei.value.error_message


def test_mode_is_per_graph_id():
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        s.add_graph(2, ga.Graph.from_onnx(add_model()))
        _run("RunGraph", s, st, 1, [A, A])
        (y,) = _run("RunGraphWithStreamAsync", s, st, 2, [A, A])
        np.testing.assert_array_equal(y, 2 * A)
        (y,) = _run("RunGraph", s, st, 1, [A, A])
        np.testing.assert_array_equal(y, 2 * A)


def test_mode_is_per_session():
    g = ga.Graph.from_onnx(add_model())
    with ga.Session() as s1, ga.Session() as s2, ga.Stream() as st:
        s1.add_graph(1, g)
        s2.add_graph_clone(1, g)
        _run("RunGraph", s1, st, 1, [A, A])
        (y,) = _run("RunGraphWithStreamAsync", s2, st, 1, [A, A])
        np.testing.assert_array_equal(y, 2 * A)
