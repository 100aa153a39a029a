"""ONNX conformance: the whole node test suite of ``onnx.backend.test.case.node.collect_testcases()`` (every case
whose graph inputs and outputs are numeric or bool tensors, ``*_expanded`` function-body variants included) run
through geasync's public API.

Every case passes or is listed in ``skips()`` below, the one place for skips, each with a concrete reason; the
operators another change is adding are one group generated from ``NOT_IMPLEMENTED_YET``. A case belongs to the
operator whose node test it is (an ``*_expanded`` case to the operator it expands).

The cases run in worker subprocesses (``python tests/test_conformance.py --worker``), so a native crash or a hang
fails the one case it happened in and the worker restarts after it. ``test_zz_summary`` prints cases passed /
skipped / failed and the operators complete, and, when onnxruntime is installed, onnxruntime's count on the same
cases and comparison.
"""

from __future__ import annotations

import collections
import json
import os
import pickle
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import pytest

from geasync._metadata import MAX_OPSETS

# The first case's setup runs the whole suite in worker subprocesses (minutes on a loaded 2-core machine).
pytestmark = pytest.mark.timeout(900)

WORKERS = 2
CASE_TIMEOUT_S = 30  # a case running longer counts as hung (the worker is killed and restarted after it)

# Operators not implemented yet: their cases (plain and expanded) are skipped as "operator not implemented yet: <op>".
# Implementing one (or merging the change that adds it) means deleting its name here.
NOT_IMPLEMENTED_YET = set(
    # the rest of the suite, still open
    "ImageDecoder".split()
)

# Random operators: their values cannot match the reference's generator (the node cases compare values); the
# twin's seeded generators are checked statistically in tests/test_ops_graph.py.
RANDOM = set("RandomNormal RandomUniform RandomNormalLike RandomUniformLike Multinomial Bernoulli".split())

# Operators outside the default ai.onnx domain (training, ai.onnx.ml) or over optional-typed values.
OUT_OF_SCOPE = {
    **dict.fromkeys("Adagrad Adam Momentum".split(),
                    "ai.onnx.preview.training operator: the twin runs the default ai.onnx domain only"),
    **dict.fromkeys("TreeEnsemble Binarizer ArrayFeatureExtractor".split(),
                    "ai.onnx.ml operator: the twin runs the default ai.onnx domain only"),
    **dict.fromkeys("OptionalHasElement OptionalGetElement".split(),
                    "optional-typed values are not supported by the twin (tensors only)"),
}

# Operators of the ai.onnx.preview domain: their plain cases are skipped; their expanded cases (default-domain bodies)
# run.
PREVIEW_DOMAIN = {"FlexAttention"}

# Expanded (function-body) cases that fail for a reason other than an operator of their body not implemented yet.
EXPANDED_FAILURES = {
    **dict.fromkeys(("test_affine_grid_2d_expanded", "test_affine_grid_2d_align_corners_expanded"),
                    "shape inference from the declared shapes (InferShapes, before any value is known): the body's "
                    "Squeeze without axes of a tensor whose dims depend on values keeps those dims, so a later "
                    "Transpose sees rank 4 for rank 3; the compiled plan itself would be right"),
    "test_attention_4d_causal_fp16_expanded":
        "float16 expanded body: the reference rounds every intermediate to float16, the twin's float16 Softmax "
        "computes in float32; the difference exceeds the case's rtol=1e-3",
}

# Cases whose expected values carry the reference's own float32 rounding beyond the case's tolerance.
REFERENCE_ROUNDING = dict.fromkeys(
    ("test_dft_inverse", "test_dft_inverse_opset19"),
    "the expected values come from numpy's single-precision FFT: where the exact imaginary part is 0 they hold "
    "float32 rounding noise of 1.9e-7, above the case's atol=1e-7; the twin's DFT accumulates in double and agrees "
    "with numpy's double-precision ifft (checked in tests/test_ops_signal_grid.py)")

_EXOTIC = "{} is not an element type the twin (or GE's DataType set that geasync exposes) represents"


def skips(cases) -> dict[str, str]:
    """case name -> reason, for every case that is not expected to pass. cases: [(operator, case)]."""
    s: dict[str, str] = {}
    for op, case in cases:
        name = case.name
        used = sorted({n.op_type for n in case.model.graph.node} & NOT_IMPLEMENTED_YET)
        newer = [f"{o.domain or 'ai.onnx'} {o.version}" for o in case.model.opset_import
                 if o.version > MAX_OPSETS.get(o.domain, o.version)]
        if newer:  # an onnx release newer than the one the twin's operators follow
            s[name] = f"imports opset {', '.join(newer)}, newer than the runtime supports (Graph refuses it)"
        elif op in OUT_OF_SCOPE:
            s[name] = OUT_OF_SCOPE[op]
        elif op in RANDOM:
            s[name] = ("random operator: its values cannot match the reference's generator; the twin's seeded "
                       "generators are checked statistically in tests/test_ops_graph.py")
        elif "_expanded" not in name and op in PREVIEW_DOMAIN:
            s[name] = "ai.onnx.preview operator: the twin runs the default ai.onnx domain only"
        elif "_expanded" not in name and op in NOT_IMPLEMENTED_YET:
            s[name] = f"operator not implemented yet: {op}"
        elif used:
            s[name] = f"the expanded graph uses an operator not implemented yet: {', '.join(used)}"
        elif name in EXPANDED_FAILURES:
            s[name] = EXPANDED_FAILURES[name]
        elif name in REFERENCE_ROUNDING:
            s[name] = REFERENCE_ROUNDING[name]
    s.update({
        "test_batchnorm_example_training_mode":
            "BatchNormalization training_mode=1 (running statistics outputs): the twin implements inference only",
        "test_batchnorm_epsilon_training_mode":
            "BatchNormalization training_mode=1 (running statistics outputs): the twin implements inference only",
    })
    for name in ("test_training_dropout", "test_training_dropout_mask", "test_training_dropout_default",
                 "test_training_dropout_default_mask"):
        s[name] = ("Dropout training_mode=1 with ratio > 0 draws a random mask (the expected values come from numpy's "
                   "generator); the twin implements inference only and refuses it at run time")
    names = {c.name for _, c in cases}
    return {k: v for k, v in s.items() if k in names}


# ---------------------------------------------------------------------------------------------------------------
# Case collection

_NUMERIC = None


def _numeric_types():
    import onnx

    T = onnx.TensorProto
    return {T.FLOAT, T.DOUBLE, T.FLOAT16, T.INT8, T.INT16, T.INT32, T.INT64, T.UINT8, T.UINT16, T.UINT32, T.UINT64,
            T.BOOL}


def _is_numeric_tensor_case(model, numeric) -> bool:
    for vi in list(model.graph.input) + list(model.graph.output):
        t = vi.type
        if not t.HasField("tensor_type") or t.tensor_type.elem_type not in numeric:
            return False
    return True


def collect():
    """[(operator, case)] of the suite's numeric/bool tensor cases, in the suite's order."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    numeric = _numeric_types()
    cases = [c for c in cases if _is_numeric_tensor_case(c.model, numeric)]
    op_of = {c.name: c.model.graph.node[0].op_type for c in cases
             if "_expanded" not in c.name and len(c.model.graph.node) == 1}
    out = []
    for c in cases:
        base = c.name.split("_expanded")[0]
        op = op_of.get(c.name) or op_of.get(base)
        if op is None:  # an expanded case whose plain case is not numeric: name it by its first node
            op = c.model.graph.node[0].op_type
        out.append((op, c))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Running one case (in a worker process)


def _to_numpy(x):
    import onnx.numpy_helper

    import onnx

    if isinstance(x, onnx.TensorProto):
        return onnx.numpy_helper.to_array(x)
    return np.asarray(x)


def check_outputs(rtol, atol, ref_outputs, outputs) -> None:
    assert len(outputs) == len(ref_outputs), f"{len(outputs)} outputs, expected {len(ref_outputs)}"
    for i, (ref, out) in enumerate(zip(ref_outputs, outputs, strict=True)):
        ref = _to_numpy(ref)
        assert out.dtype == ref.dtype, f"output {i}: dtype {out.dtype}, expected {ref.dtype}"
        assert out.shape == ref.shape, f"output {i}: shape {out.shape}, expected {ref.shape}"
        if ref.dtype == np.bool_ or np.issubdtype(ref.dtype, np.integer):
            np.testing.assert_array_equal(out, ref, err_msg=f"output {i}")
        else:
            np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol, err_msg=f"output {i}")


class _GeasyncRunner:
    def __init__(self):
        import geasync as ga

        self._ga = ga
        self._session = ga.Session()
        self._next_id = 0

    def run(self, model_bytes, data_sets):
        import onnx

        ga = self._ga
        self._next_id += 1
        gid = self._next_id
        self._session.add_graph(gid, ga.Graph.from_onnx(onnx.load_from_string(model_bytes)))
        try:
            for inputs, _ in data_sets:
                outs = self._session.run_graph(gid, [np.require(_to_numpy(x), requirements="C") for x in inputs])
                yield [np.array(t.numpy(), copy=True) for t in outs]
        finally:
            self._session.remove_graph(gid)


class _OrtRunner:
    def __init__(self):
        import onnxruntime as ort

        self._ort = ort
        self._opts = ort.SessionOptions()
        self._opts.log_severity_level = 4

    def run(self, model_bytes, data_sets):
        sess = self._ort.InferenceSession(model_bytes, self._opts, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        for inputs, _ in data_sets:
            feeds = {n: _to_numpy(x) for n, x in zip(names, inputs, strict=True)}
            yield [np.asarray(o) for o in sess.run(None, feeds)]


def _run_case(runner, case) -> tuple[bool, str]:
    name, model_bytes, data_sets, rtol, atol = case
    try:
        results = runner.run(model_bytes, data_sets)
        for (_, ref_outputs), outputs in zip(data_sets, results, strict=True):
            check_outputs(rtol, atol, ref_outputs, outputs)
        return True, ""
    except Exception as e:  # noqa: BLE001 (the message is the result)
        return False, f"{type(e).__name__}: {str(e).strip()[:2000]}"


def _worker_main(path: str, engine: str) -> None:
    import faulthandler
    import signal

    faulthandler.enable()
    with open(path, "rb") as f:
        cases = pickle.load(f)
    runner = _GeasyncRunner() if engine == "geasync" else _OrtRunner()
    for line in sys.stdin:
        i = int(line)
        signal.alarm(CASE_TIMEOUT_S)  # SIGALRM's default action ends the process: a hang is one failed case
        ok, msg = _run_case(runner, cases[i])
        signal.alarm(0)
        sys.stdout.write(json.dumps([i, ok, msg]) + "\n")
        sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: the runner's session may still be draining


def run_cases(cases, indices, engine: str) -> dict[int, tuple[bool, str]]:
    """Runs cases[i] for i in indices in WORKERS subprocesses; a crash or a hang fails that case only."""
    with tempfile.NamedTemporaryFile(suffix=".pkl", delete=False) as f:
        pickle.dump(cases, f)
        path = f.name
    try:
        results: dict[int, tuple[bool, str]] = {}
        queues = [list(indices[k::WORKERS]) for k in range(WORKERS)]
        procs = {k: _spawn(path, engine, q) for k, q in enumerate(queues) if q}
        while procs:
            k, p = next(iter(procs.items()))
            q = queues[k]
            for line in p.stdout:
                i, ok, msg = json.loads(line)
                results[i] = (ok, msg)
            rc = p.wait()
            p.stdout.close()
            del procs[k]
            left = [i for i in q if i not in results]
            if left:  # the worker died in left[0]
                how = "hung (killed after %ds)" % CASE_TIMEOUT_S if rc == -14 else f"crashed (exit status {rc})"
                results[left[0]] = (False, f"the {engine} worker process {how} in this case")
                if left[1:]:
                    queues[k] = left[1:]
                    procs[k] = _spawn(path, engine, left[1:])
        return results
    finally:
        os.unlink(path)


def _spawn(path, engine, queue):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", path, engine],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env=env)
    p.stdin.write("".join(f"{i}\n" for i in queue))
    p.stdin.close()
    return p


def _ort_available() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------------------------------------------------
# The tests

if __name__ != "__main__":
    ALL_CASES = collect()
    OP_OF = {c.name: op for op, c in ALL_CASES}
    SKIPS = skips(ALL_CASES)
    OPERATORS = sorted({op for op, _ in ALL_CASES})
    _RESULTS: dict[str, tuple[bool, str]] = {}
    _ORT_RESULTS: dict[str, tuple[bool, str]] = {}


def _packed(case):
    return (case.name, case.model.SerializeToString(), [(list(i), list(o)) for i, o in case.data_sets],
            case.rtol, case.atol)


@pytest.fixture(scope="module")
def results(request):
    """Runs every selected, non-skipped case once (in worker subprocesses) before the first test needs it."""
    if not _RESULTS:
        selected = {item.callspec.params["case"].name for item in request.session.items
                    if getattr(item, "module", None) is request.module and getattr(item, "callspec", None)
                    and "case" in item.callspec.params}  # other files' tests may have a "case" parameter too
        cases = [c for _, c in ALL_CASES if c.name in selected]
        packed = [_packed(c) for c in cases]
        todo = [i for i, c in enumerate(cases) if c.name not in SKIPS]
        for i, r in run_cases(packed, todo, "geasync").items():
            _RESULTS[cases[i].name] = r
        if _ort_available():
            for i, r in run_cases(packed, list(range(len(cases))), "onnxruntime").items():
                _ORT_RESULTS[cases[i].name] = r
    return _RESULTS


@pytest.mark.parametrize("op,case", ALL_CASES if __name__ != "__main__" else [],
                         ids=[c.name for _, c in ALL_CASES] if __name__ != "__main__" else [])
def test_node_case(op, case, results):  # noqa: ARG001
    if case.name in SKIPS:
        pytest.skip(SKIPS[case.name])
    ok, msg = results[case.name]
    assert ok, msg


def _summary(results, names) -> tuple[int, int, int, list[str]]:
    passed = sum(1 for n in names if n in results and results[n][0])
    failed = sum(1 for n in names if n in results and not results[n][0])
    by_op = collections.defaultdict(list)
    for n in names:
        by_op[OP_OF[n]].append(n)
    complete = [op for op, ns in by_op.items() if all(n in results and results[n][0] for n in ns)]
    return passed, failed, len(by_op), complete


def test_zz_summary(capsys, results):
    names = [c.name for _, c in ALL_CASES if c.name in results or c.name in SKIPS]
    passed, failed, nops, complete = _summary(results, names)
    skipped = sum(1 for n in names if n in SKIPS)
    failures = sorted(n for n in names if n in results and not results[n][0])
    with capsys.disabled():
        print(f"\nONNX node conformance through geasync: {len(names)} cases over {nops} operators")
        print(f"  geasync: {passed} passed, {skipped} skipped, {failed} failed; "
              f"{len(complete)} operators complete (every case passes)")
        if _ORT_RESULTS:
            o_passed, _, _, o_complete = _summary(_ORT_RESULTS, [n for n in names if n in _ORT_RESULTS])
            print(f"  onnxruntime (same cases, same checks): {o_passed} passed; {len(o_complete)} operators complete")
        for n in failures:
            print(f"  FAILED {n} [{OP_OF[n]}]: {results[n][1].splitlines()[0][:200]}")
    stale = sorted(set(SKIPS) - set(OP_OF))
    assert not stale, f"skips() lists cases that do not exist: {stale}"
    assert not failures, f"{len(failures)} cases failed: {failures}"


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    _worker_main(sys.argv[2], sys.argv[3])
