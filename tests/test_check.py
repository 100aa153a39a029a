"""``python -m geasync check``: every unsupported node listed, inputs/outputs/opset reported, CI exit codes, and
models with external data (read from files beside the model, never from outside its directory)."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pytest

import geasync as ga
from geasync import _check

import onnx  # noqa: E402  (a test dependency)
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_cases import graph_model  # noqa: E402


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    return graph_model(nodes, inputs, outputs, opset=opset, initializers=initializers)


def _good_model():
    return _model([helper.make_node("Relu", ["x"], ["y"])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])


def _bad_model():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="ok"),
             helper.make_node("NoSuchOp", ["a"], ["b"], name="first_bad"),
             helper.make_node("Relu", ["b"], ["c"], name="fine_again"),
             helper.make_node("Custom", ["c"], ["y"], name="second_bad", domain="com.example")]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    return m


def test_runnable_model_report():
    r = _check.check_model(_good_model())
    assert r.runs_on_twin and r.problems == ()
    assert r.opset == 17
    assert [(v.name, v.dtype, v.shape) for v in r.inputs] == [("x", "float32", (None, 3))]
    assert [(v.name, v.dtype, v.shape) for v in r.outputs] == [("y", "float32", (None, 3))]


def test_every_unsupported_node_is_listed():
    r = _check.check_model(_bad_model())
    assert not r.runs_on_twin
    assert len(r.problems) == 2
    assert "node 'first_bad' (op NoSuchOp)" in r.problems[0] and "not supported" in r.problems[0]
    assert "node 'second_bad' (op Custom)" in r.problems[1] and "com.example" in r.problems[1]


def test_graph_level_problem_after_node_checks():
    m = _model([helper.make_node("Add", ["x", "missing"], ["y"], name="add")],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    r = _check.check_model(m)
    assert len(r.problems) == 1 and "'missing'" in r.problems[0]


def test_corrupt_bytes_are_a_problem_not_a_crash():
    r = _check.check_model(b"\x0a\xff\xff\xff")
    assert not r.runs_on_twin and "corrupt" in r.problems[0]


def test_main_exit_codes_and_json(tmp_path):
    good, bad = tmp_path / "good.onnx", tmp_path / "bad.onnx"
    onnx.save(_good_model(), good)
    onnx.save(_bad_model(), bad)
    out = io.StringIO()
    assert _check.main([str(good)], out=out) == 0
    assert "runs on the twin: yes" in out.getvalue() and "x: float32[?, 3]" in out.getvalue()
    out = io.StringIO()
    assert _check.main([str(good), str(bad), "--json"], out=out) == 1
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [x["runs_on_twin"] for x in lines] == [True, False]
    assert len(lines[1]["problems"]) == 2
    assert _check.main([str(tmp_path / "absent.onnx")], out=io.StringIO()) == 2


def test_command_line(tmp_path):
    bad = tmp_path / "bad.onnx"
    onnx.save(_bad_model(), bad)
    p = subprocess.run([sys.executable, "-m", "geasync", "check", str(bad)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)  # not the repository root: its source tree is not built in place
    assert p.returncode == 1, p.stderr
    assert "first_bad" in p.stdout and "second_bad" in p.stdout


def _external_model(tmp_path, location="weights.bin"):
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    init = numpy_helper.from_array(w, "w")
    m = _model([helper.make_node("Add", ["x", "w"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [init])
    path = tmp_path / "model.onnx"
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True, location=location,
                    size_threshold=0)
    return path, w


def test_external_data_loads_from_beside_the_model(tmp_path):
    path, w = _external_model(tmp_path)
    assert (tmp_path / "weights.bin").exists()
    x = np.ones((2, 3), np.float32)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(str(path)))
        (y,) = s.run_graph(1, [x])
        np.testing.assert_array_equal(y.numpy(), x + w)
    assert _check.check_model(str(path)).runs_on_twin


def test_external_data_outside_the_model_directory_is_refused(tmp_path):
    inner = tmp_path / "inner"
    inner.mkdir()
    path, _ = _external_model(inner)
    m = onnx.load(path, load_external_data=False)
    for entry in m.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = "../secret.bin"
    (tmp_path / "secret.bin").write_bytes(b"\0" * 24)
    onnx.save_model(m, path)
    with pytest.raises(ValueError, match="not a file inside the model's directory"):
        ga.Graph.from_onnx(str(path))


def test_external_data_range_beyond_the_file_is_refused(tmp_path):
    path, _ = _external_model(tmp_path)
    m = onnx.load(path, load_external_data=False)
    for entry in m.graph.initializer[0].external_data:
        if entry.key == "length":
            entry.value = "4096"
    onnx.save_model(m, path)
    with pytest.raises(ValueError, match="beyond the end"):
        ga.Graph.from_onnx(str(path))
    assert _check.main([str(path)], out=io.StringIO()) == 2


_EVERY_NODE_MODEL = r"""
import json, sys, warnings
from onnx.backend.test.case.node import collect_testcases
from geasync import _check
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    cases = collect_testcases()
rows = []
for case in cases:
    try:
        r = _check.check_model(case.model)
    except Exception as exc:  # a model the reader refuses as a whole is a clear error, not a report
        rows.append([case.name, None, f"{type(exc).__name__}: {exc}", []])
        continue
    assert r.opset >= 0 and len(r.outputs) == len(case.model.graph.output), case.name  # 0: no ai.onnx import
    rows.append([case.name, r.runs_on_twin, "", list(r.problems)])
json.dump(rows, sys.stdout)
"""


def test_check_reports_on_every_node_test_model(tmp_path):
    """``geasync check`` on each of the ONNX node-test models (all of them, numeric or not): a report or a clear
    error for every one, never a crash; every operator not implemented yet is named in its model's problems."""
    from test_conformance import NOT_IMPLEMENTED_YET

    from onnx.backend.test.case.node import collect_testcases

    # run outside the repository: from its root, ``python -c`` would import the unbuilt source tree
    proc = subprocess.run([sys.executable, "-c", _EVERY_NODE_MODEL], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout)
    models = {c.name: c.model for c in collect_testcases()}
    assert len(rows) == len(models) > 1500
    errors = [(name, err) for name, _, err, _ in rows if err]
    # whole-model refusals are GeErrors naming what is wrong (e.g. a sequence- or optional-typed graph input)
    assert all(err.startswith(("GeError", "GraphError", "ValueError", "TypeError")) for _, err in errors), errors[:5]
    assert len(errors) < len(rows) // 10, errors[:10]
    for name, runs, _, problems in rows:
        missing = {n.op_type for n in models[name].graph.node} & NOT_IMPLEMENTED_YET
        if runs is not None and missing:
            assert not runs, name
            assert all(any(op in p for p in problems) for op in missing), (name, missing, problems)


def test_external_data_of_constants_and_subgraphs_loads_from_beside_the_model(tmp_path):
    """onnx.save_model(save_as_external_data=True) moves subgraphs' initializers out too (and Constant nodes' values
    with convert_attribute=True): only the main graph's initializers were read back, the others refused with "give
    the model by path" although it was given by path."""
    c = np.arange(6, dtype=np.float32).reshape(2, 3)
    then_w = np.full((2, 3), 10, np.float32)
    then_g = helper.make_graph([helper.make_node("Add", ["xc", "tw"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])],
                               [numpy_helper.from_array(then_w, "tw")])
    else_g = helper.make_graph([helper.make_node("Constant", [], ["e"], value=numpy_helper.from_array(-c))], "else",
                               [], [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3])])
    m = _model([helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(c)),
                helper.make_node("Add", ["x", "c"], ["xc"]),
                helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [])
    path = tmp_path / "model.onnx"
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin",
                    size_threshold=0, convert_attribute=True)
    assert (tmp_path / "weights.bin").stat().st_size == 3 * 24
    x = np.ones((2, 3), np.float32)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(str(path)))
        np.testing.assert_array_equal(s.run_graph(1, [x, np.array(True)])[0].numpy(), x + c + then_w)
        np.testing.assert_array_equal(s.run_graph(1, [x, np.array(False)])[0].numpy(), -c)
