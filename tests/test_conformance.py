"""ONNX conformance: every node test case of ``onnx.backend.test.case.node.collect_testcases()`` for the operators
the twin supports, run through geasync's public API by a small ``onnx.backend.base.Backend`` adapter.

A case belongs to an operator when its graph is that single operator (the ``*_expanded`` variants, whose graphs
are function bodies made of other operators, are not collected). Every collected case passes or is listed in
SKIPS below, the one place for skips, with a concrete reason. ``test_zz_summary`` prints "N passed, M skipped" per
operator (to the terminal, whatever -s says) and fails if any case failed or a SKIPS entry is stale.
"""

from __future__ import annotations

import collections
import warnings

import numpy as np
import pytest

import geasync as ga

import onnx  # noqa: E402  (a test dependency)
import onnx.numpy_helper  # noqa: E402
from onnx.backend.base import Backend, BackendRep  # noqa: E402

OPERATORS = (
    # elementwise and math
    "Add Sub Mul Div Pow Sqrt Exp Log Neg Abs Reciprocal Erf Max Min Clip Where Equal Less Greater Not And Or "
    # activations
    "Relu LeakyRelu Sigmoid Tanh Gelu Softmax LogSoftmax "
    # linear algebra and NN
    "MatMul Gemm Conv MaxPool AveragePool GlobalAveragePool BatchNormalization LayerNormalization "
    # shape and data movement
    "Reshape Flatten Transpose Concat Split Slice Gather Squeeze Unsqueeze Expand Shape ConstantOfShape Cast "
    "Identity Constant Range "
    # reductions
    "ReduceSum ReduceMean ReduceMax"
).split()

_NO_BF16 = "bfloat16 tensors cannot cross geasync's numpy API (numpy has no bfloat16); the twin itself computes bfloat16"
_EXOTIC = "{} is not an element type the twin (or GE's DataType set that geasync exposes) represents"
_TYPE_NAMES = {
    "FLOAT8E4M3FN": "float8e4m3fn", "FLOAT8E4M3FNUZ": "float8e4m3fnuz", "FLOAT8E5M2": "float8e5m2",
    "FLOAT8E5M2FNUZ": "float8e5m2fnuz", "UINT4": "uint4", "INT4": "int4", "FLOAT4E2M1": "float4e2m1",
    "UINT2": "uint2", "INT2": "int2", "STRING": "string", "FLOAT8E8M0": "float8e8m0",
}


def _skips() -> dict[str, str]:
    s: dict[str, str] = {
        # -- dtypes the twin does not represent --
        "test_equal_string": _EXOTIC.format("string"),
        "test_equal_string_broadcast": _EXOTIC.format("string"),
        "test_identity_sequence": "sequence-typed values are not supported by the twin (tensors only)",
        "test_identity_opt": "optional-typed values are not supported by the twin (tensors only)",
        "test_range_bfloat16_type_positive_delta": _NO_BF16,
        "test_cast_FLOAT_to_BFLOAT16": _NO_BF16,
        "test_cast_BFLOAT16_to_FLOAT": _NO_BF16,
        "test_castlike_FLOAT_to_BFLOAT16_expanded": _NO_BF16,
        "test_castlike_BFLOAT16_to_FLOAT_expanded": _NO_BF16,
        # -- semantics outside the twin's scope --
        "test_batchnorm_example_training_mode":
            "BatchNormalization training_mode=1 (running statistics outputs): the twin implements inference only",
        "test_batchnorm_epsilon_training_mode":
            "BatchNormalization training_mode=1 (running statistics outputs): the twin implements inference only",
    }
    return s


# Inputs whose *contents* determine an output shape. The engine compiles such graphs into value-dependent plans
# (twin::onnx::Plan::Specialize: one plan per distinct shape-input contents); the GE layer must ask for them
# (CompileOptions::allow_value_dependent) and run the specialised plan. Cases that feed these inputs at run time
# are skipped, with this reason, only when the GE layer in use does not do so yet (probed once, below).
SHAPE_INPUTS = {
    "Reshape": {1}, "Expand": {1}, "ConstantOfShape": {0}, "Range": {0, 1, 2}, "Slice": {1, 2, 3, 4},
    "Split": {1}, "Squeeze": {1}, "Unsqueeze": {1}, "ReduceSum": {1}, "ReduceMean": {1}, "ReduceMax": {1},
}
_RUNTIME_SHAPE_REASON = ("an output shape depends on the contents of a graph input fed at run time: the engine "
                         "supports it (value-dependent plans, Plan::Specialize) but this GE layer does not use them")


def _shape_input_skips(cases) -> dict[str, str]:
    if _runtime_shape_inputs_supported():
        return {}
    out = {}
    for case in cases:
        node = case.model.graph.node[0]
        graph_inputs = {i.name for i in case.model.graph.input} - {t.name for t in case.model.graph.initializer}
        if any(i < len(node.input) and node.input[i] in graph_inputs for i in SHAPE_INPUTS.get(node.op_type, ())):
            out[case.name] = _RUNTIME_SHAPE_REASON
    return out


def _runtime_shape_inputs_supported() -> bool:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "s"], ["y"])], "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    try:
        with ga.Session() as s:
            s.add_graph(1, ga.Graph.from_onnx(model))
            (y,) = s.run_graph(1, [np.zeros((2, 3), np.float32), np.array([3, 2], np.int64)])
            return y.numpy().shape == (3, 2)
    except ga.GeError:
        return False


def _exotic_cast_skips(names) -> dict[str, str]:
    out = {}
    for name in names:
        if not name.startswith(("test_cast", "test_castlike")):
            continue
        for tname, pretty in _TYPE_NAMES.items():
            parts = name.replace("_expanded", "").split("_")
            if tname in parts or "e8m0" in parts:
                out[name] = _EXOTIC.format(pretty if tname in parts else "float8e8m0")
                break
    return out


# ---------------------------------------------------------------------------------------------------------------
# The backend adapter


def _to_numpy(x) -> np.ndarray:
    if isinstance(x, onnx.TensorProto):
        return onnx.numpy_helper.to_array(x)
    return np.asarray(x)


class GeasyncRep(BackendRep):
    """One prepared model: a graph added to a shared Session under its own id."""

    def __init__(self, session: ga.Session, graph_id: int, model) -> None:
        self._session = session
        self._graph_id = graph_id
        session.add_graph(graph_id, ga.Graph.from_onnx(model))

    def run(self, inputs, **kwargs):  # noqa: ARG002
        outs = self._session.run_graph(self._graph_id, [np.require(_to_numpy(x), requirements="C") for x in inputs])
        return [np.array(t.numpy(), copy=True) for t in outs]

    def close(self) -> None:
        self._session.remove_graph(self._graph_id)


class GeasyncBackend(Backend):
    _session: ga.Session | None = None
    _next_id = 1

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs):  # noqa: ARG003
        super().prepare(model, device, **kwargs)
        if cls._session is None or cls._session.closed:
            cls._session = ga.Session()
        cls._next_id += 1
        return GeasyncRep(cls._session, cls._next_id, model)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"

    @classmethod
    def close(cls) -> None:
        if cls._session is not None:
            cls._session.close()
            cls._session = None


# ---------------------------------------------------------------------------------------------------------------
# Case collection


def _collect():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    by_op: dict[str, list] = collections.defaultdict(list)
    for case in cases:
        nodes = case.model.graph.node
        if len(nodes) == 1 and nodes[0].op_type in OPERATORS and nodes[0].domain in ("", "ai.onnx"):
            by_op[nodes[0].op_type].append(case)
    return by_op


CASES_BY_OP = _collect()
ALL_CASES = [(op, c) for op in OPERATORS for c in CASES_BY_OP.get(op, [])]
SKIPS = {**_skips(), **_exotic_cast_skips([c.name for _, c in ALL_CASES]), **_shape_input_skips(c for _, c in ALL_CASES)}
RESULTS: dict[str, dict[str, int]] = collections.defaultdict(lambda: {"passed": 0, "skipped": 0, "failed": 0})
SEEN: set[str] = set()


@pytest.fixture(scope="module", autouse=True)
def _backend_session():
    yield
    GeasyncBackend.close()


def _assert_outputs_match(case, ref_outputs, outputs) -> None:
    assert len(outputs) == len(ref_outputs), f"{len(outputs)} outputs, expected {len(ref_outputs)}"
    for i, (ref, out) in enumerate(zip(ref_outputs, outputs)):
        ref = _to_numpy(ref)
        assert out.dtype == ref.dtype, f"output {i}: dtype {out.dtype}, expected {ref.dtype}"
        assert out.shape == ref.shape, f"output {i}: shape {out.shape}, expected {ref.shape}"
        if ref.dtype == np.bool_ or np.issubdtype(ref.dtype, np.integer):
            np.testing.assert_array_equal(out, ref, err_msg=f"output {i}")
        else:
            np.testing.assert_allclose(out, ref, rtol=case.rtol, atol=case.atol, err_msg=f"output {i}")


@pytest.mark.parametrize("op,case", ALL_CASES, ids=[c.name for _, c in ALL_CASES])
def test_node_case(op, case):
    SEEN.add(case.name)
    if case.name in SKIPS:
        RESULTS[op]["skipped"] += 1
        pytest.skip(SKIPS[case.name])
    RESULTS[op]["failed"] += 1  # until it passes
    rep = GeasyncBackend.prepare(case.model)
    try:
        for inputs, ref_outputs in case.data_sets:
            outputs = rep.run(list(inputs))
            _assert_outputs_match(case, ref_outputs, outputs)
    finally:
        rep.close()
    RESULTS[op]["failed"] -= 1
    RESULTS[op]["passed"] += 1


def test_zz_summary(capsys):
    """Per-operator totals (printed to the terminal) and the integrity of the skip list."""
    stale = sorted(set(SKIPS) - {c.name for _, c in ALL_CASES})
    lines = [f"{'operator':<20}{'passed':>8}{'skipped':>9}{'failed':>8}"]
    total = collections.Counter()
    for op in OPERATORS:
        r = RESULTS[op]
        n = len(CASES_BY_OP.get(op, []))
        lines.append(f"{op:<20}{r['passed']:>8}{r['skipped']:>9}{r['failed']:>8}   ({n} cases)")
        total.update(r)
    lines.append(f"{'TOTAL':<20}{total['passed']:>8}{total['skipped']:>9}{total['failed']:>8}")
    with capsys.disabled():
        print("\nONNX node conformance through geasync (N passed, M skipped per operator):")
        for op in OPERATORS:
            r = RESULTS[op]
            print(f"  {op}: {r['passed']} passed, {r['skipped']} skipped" + (f", {r['failed']} failed" if r["failed"] else ""))
        print(f"  TOTAL: {total['passed']} passed, {total['skipped']} skipped"
              + (f", {total['failed']} failed" if total["failed"] else ""))
    assert not stale, f"SKIPS lists cases that do not exist: {stale}"
    if len(SEEN) == len(ALL_CASES):  # the whole module ran: every case passed or was skipped as listed
        assert total["failed"] == 0, "\n".join(lines)
        assert total["passed"] + total["skipped"] == len(ALL_CASES)
        for op in OPERATORS:
            assert CASES_BY_OP.get(op), f"onnx has no node test case for {op}"
