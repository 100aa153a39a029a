"""Helpers for the operator test files: graph models from value infos, one run on a shared session (the graph is
removed after it), onnx.reference's answer, and the comparison every operator test makes."""

from __future__ import annotations

import itertools
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import geasync as ga

from onnx import TensorProto, helper  # noqa: E402  (a test dependency)
from onnx.reference import ReferenceEvaluator  # noqa: E402

# Graph ids are never reused within a process, so a failed removal cannot make a later test fail.
_ids = itertools.count(1)


def fresh_graph_id() -> int:
    return next(_ids)


def value_info(name, elem_type=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem_type, shape)


def graph_model(nodes, inputs, outputs, *, opset, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run_once(session, model, feeds):
    """The model's outputs on ``feeds`` (copies, so they outlive the graph's removal)."""
    gid = fresh_graph_id()
    session.add_graph(gid, ga.Graph.from_onnx(model))
    try:
        outputs = session.run_graph(gid, [np.require(x, requirements="C") for x in feeds])
        return [np.array(t.numpy(), copy=True) for t in outputs]
    finally:
        session.remove_graph(gid)


def run_twin(model, feeds):
    """The model's outputs for ``feeds`` (by input name), from a session of its own."""
    names = [i.name for i in model.graph.input]
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        outs = s.run_graph(1, [feeds[n] for n in names])
        got = [o.numpy().copy() for o in outs]
        del outs
    return got


def reference(model, feeds):
    names = [i.name for i in model.graph.input]
    return [np.asarray(w) for w in ReferenceEvaluator(model).run(None, dict(zip(names, feeds, strict=True)))]


def assert_close(got, want, rtol, atol):
    """Same count, shapes and dtypes; floats within tolerance (NaN matching NaN), everything else exact."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if w.dtype.kind in "fc":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)


def conv_model(op, x, w, b=None, w_input=False, relu=False, **attrs):
    """A one-op float32 Conv / ConvTranspose model (weights an initializer, or an input with ``w_input``; an
    optional bias and a Relu after it) and its feeds."""
    from conftest import make_model

    t = TensorProto.FLOAT
    inits = [] if w_input else [("w", w)]
    if b is not None:
        inits.append(("b", b))
    nodes = [helper.make_node(op, ["x", "w"] + (["b"] if b is not None else []), ["c"], **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    ins = [("x", t, list(x.shape))] + ([("w", t, list(w.shape))] if w_input else [])
    model = make_model(nodes, ins, [("y" if relu else "c", t, None)], initializers=inits, opset=19)
    return model, ({"x": x, "w": w} if w_input else {"x": x})


def check_twin(model, feeds, tol=1e-4):
    """The twin's outputs for ``feeds`` (a {name: array} mapping) within ``tol`` of onnx.reference's; returned."""
    names = [i.name for i in model.graph.input]
    got = run_twin(model, feeds)
    assert_close(got, reference(model, [feeds[n] for n in names]), tol, tol)
    return got


def check_runs(model, feed_sets, rtol=1e-5, atol=1e-5, quantum=None, evaluator=None):
    """One graph run on every feed set (different batch / sequence sizes), each against onnx.reference (or
    ``evaluator``). ``quantum``: float outputs may differ by that much, and integer outputs by one step, where a
    quantised value's rounding tie breaks differently."""
    names = [i.name for i in model.graph.input]
    ref = evaluator or ReferenceEvaluator(model)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        for feeds in feed_sets:
            outs = s.run_graph(1, list(feeds))
            got = [o.numpy().copy() for o in outs]
            del outs
            want = ref.run(None, dict(zip(names, feeds, strict=True)))
            assert len(got) == len(want)
            for g, w in zip(got, want, strict=True):
                w = np.asarray(w)
                assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
                if w.dtype.kind == "f":
                    tol = atol if quantum is None else quantum
                    np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=tol)
                elif quantum is not None:
                    assert np.max(np.abs(g.astype(np.int64) - w.astype(np.int64)), initial=0) <= 1
                else:
                    np.testing.assert_array_equal(g, w)


def gemm_edge_operands(m, k, n, seed):
    """float32 A (m x k) and B (k x n), k >= 12 and n >= 21, whose product meets the IEEE edge cases at known places:
    a NaN in A's first row, inf * 0 (column 7 of A's last row), inf - inf and -inf (column 11), denormal products
    that must survive, and a float32 overflow (column 20)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    a[0, 3] = np.nan
    a[-1, 5] = np.inf
    b[5, 7] = 0.0  # inf * 0: NaN in column 7 of A's last row
    b[6, 11] = -np.inf  # -inf down column 11 of every row (NaN where inf meets it)
    b[9, :] = 1e-40  # denormal products survive where the rest of the row is zero
    b[9, 20] = 1e31
    a[:, 10] = 1e-39
    a[:, 9] = 3e8  # 3e8 * 1e31 overflows float32 in column 20, only there
    return a, b


def assert_same_ieee_pattern(got, ref, rtol=1e-5, atol=1e-5):
    """The same NaN / +inf / -inf positions as ``ref``, and the finite values within tolerance."""
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    assert np.array_equal(np.isposinf(got), np.isposinf(ref)) and np.array_equal(np.isneginf(got), np.isneginf(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=rtol, atol=atol)


def check_against_reference(session, model, feeds, rtol, atol, want=None):
    """Runs the model and compares it with onnx.reference (or ``want``); returns geasync's outputs."""
    want = reference(model, feeds) if want is None else want
    got = run_once(session, model, feeds)
    assert_close(got, want, rtol=rtol, atol=atol)
    return got


def refused(session, model, pattern):
    """add_graph refuses the model with a GeError matching ``pattern``."""
    with pytest.raises(ga.GeError, match=pattern):
        session.add_graph(fresh_graph_id(), ga.Graph.from_onnx(model))


def script_output_per_instruction_set(script, test_file, isas=("avx512", "avx2", "baseline")):
    """Runs ``script`` (python -c, with the tests directory as argv[1]) once per instruction set the twin's vector
    kernels are capped at (GEASYNC_TWIN_SIMD), in subprocesses; returns {isa: its stripped stdout}."""
    tests_dir = str(pathlib.Path(test_file).resolve().parent)
    outs = {}
    for isa in isas:
        env = {**os.environ, "GEASYNC_TWIN_SIMD": isa}
        proc = subprocess.run([sys.executable, "-c", script, tests_dir], capture_output=True, text=True, env=env,
                              timeout=300, cwd=tests_dir)
        assert proc.returncode == 0, proc.stderr[-2000:]
        outs[isa] = proc.stdout.strip()
    return outs


def rerun_file_with_instruction_set(test_file, isa, select=""):
    """Runs ``test_file``'s other tests (those matching the ``-k`` expression ``select``, if given) in a subprocess
    with the twin's vector kernels capped at ``isa`` (GEASYNC_TWIN_SIMD), so the fallback instruction sets pass the
    same checks as the CPU's best."""
    env = {**os.environ, "GEASYNC_TWIN_SIMD": isa}
    tests_dir = pathlib.Path(test_file).resolve().parent
    expr = "not fallback_instruction_sets" + (f" and ({select})" if select else "")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file), "-k",
         expr], capture_output=True, text=True, timeout=600, env=env,
        cwd=str(tests_dir))  # not the root: its source tree is not built in place by a non-editable install
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout
