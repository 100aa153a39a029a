"""LSTM's fused float32 gate pass (default activations) and the recurrent layers' panel kernel for h R^T (R packed
once when constant) against onnx.reference, and against ONNX's LSTM equations in float64 where onnx.reference ignores
an attribute (sequence_lens, clip, input_forget, activations): hidden sizes off the vector widths and panels (1, 7,
13, 17, 37) and on them (16, 64), batch 1 to 40, every direction, layout 1, peepholes, initial states, W / R / B as
initializers or as inputs, NaN / inf / huge values in X; the non-default attributes take the general path. Rerun
under each instruction set."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import assert_close, reference, rerun_file_with_instruction_set, run_once

from onnx import helper, numpy_helper

F32 = np.float32
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _vi(name, arr_or_shape, dtype=F32):
    shape = list(arr_or_shape.shape) if hasattr(arr_or_shape, "shape") else arr_or_shape
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)


def _case(
    op,
    seq,
    batch,
    inp,
    hid,
    *,
    dirs=1,
    layout=0,
    lens=None,
    h0=False,
    c0=False,
    peep=False,
    bias=True,
    const=True,
    seed=0,
    **attrs,
):
    """A one-node model and its feeds: W, R, B are initializers when ``const`` (else graph inputs)."""
    rng = np.random.default_rng(seed)
    g = GATES[op]
    x = rng.standard_normal((seq, batch, inp) if layout == 0 else (batch, seq, inp)).astype(F32)
    tensors = [
        ("w", (rng.standard_normal((dirs, g * hid, inp)) * 0.4).astype(F32)),
        ("r", (rng.standard_normal((dirs, g * hid, hid)) * 0.3).astype(F32)),
        ("b", (rng.standard_normal((dirs, 2 * g * hid)) * 0.2).astype(F32) if bias else None),
        ("l", lens),
    ]
    state = (dirs, batch, hid) if layout == 0 else (batch, dirs, hid)
    tensors.append(("h0", rng.standard_normal(state).astype(F32) if h0 else None))
    if op == "LSTM":
        tensors.append(("c0", rng.standard_normal(state).astype(F32) if c0 else None))
        tensors.append(("p", (rng.standard_normal((dirs, 3 * hid)) * 0.5).astype(F32) if peep else None))
    while tensors[-1][1] is None:
        tensors.pop()
    names, inputs, inits, feeds = ["x"], [_vi("x", x)], [], [x]
    for name, a in tensors:
        names.append(name if a is not None else "")
        if a is None:
            continue
        if const and name in ("w", "r", "b"):
            inits.append(numpy_helper.from_array(a, name))
        else:
            inputs.append(_vi(name, a, a.dtype))
            feeds.append(a)
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outs, hidden_size=hid, layout=layout, **attrs)
    graph = helper.make_graph([node], "g", inputs, [_vi(o, None) for o in outs], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    full = dict(tensors, x=x)
    return model, feeds, full


def _sig(v):
    return 1 / (1 + np.exp(-v))


def _lstm_equations(t, attrs, layout):
    """LSTM's outputs from the ONNX equations in float64 (sequence_lens, clip, input_forget honoured)."""
    x = np.asarray(t["x"], np.float64)
    if layout:
        x = x.transpose(1, 0, 2)
    seq, batch, _ = x.shape
    w, r = np.asarray(t["w"], np.float64), np.asarray(t["r"], np.float64)
    dirs, hid = w.shape[0], r.shape[2]
    b = np.zeros((dirs, 8 * hid)) if t.get("b") is None else np.asarray(t["b"], np.float64)
    p = np.zeros((dirs, 3 * hid)) if t.get("p") is None else np.asarray(t["p"], np.float64)
    h0, c0 = (np.zeros((dirs, batch, hid)) if t.get(k) is None else np.asarray(t[k], np.float64) for k in ("h0", "c0"))
    if layout:
        h0, c0 = h0.transpose(1, 0, 2), c0.transpose(1, 0, 2)
    lens = np.full(batch, seq) if t.get("l") is None else t["l"]
    clip = attrs.get("clip")
    cl = (lambda v: np.clip(v, -clip, clip)) if clip is not None else (lambda v: v)
    y, yh, yc = np.zeros((seq, dirs, batch, hid)), np.zeros((dirs, batch, hid)), np.zeros((dirs, batch, hid))
    for d in range(dirs):
        rev = d == 1 or attrs.get("direction") == "reverse"
        for n in range(batch):
            h, c = h0[d, n].copy(), c0[d, n].copy()
            for s in range(lens[n] - 1, -1, -1) if rev else range(lens[n]):
                pre = w[d] @ x[s, n] + r[d] @ h + b[d, : 4 * hid] + b[d, 4 * hid :]
                i = _sig(cl(pre[:hid] + p[d, :hid] * c))
                f = 1 - i if attrs.get("input_forget") else _sig(cl(pre[2 * hid : 3 * hid] + p[d, 2 * hid :] * c))
                c = f * c + i * np.tanh(cl(pre[3 * hid :]))
                h = _sig(cl(pre[hid : 2 * hid] + p[d, hid : 2 * hid] * c)) * np.tanh(c)
                y[s, d, n] = h
            yh[d, n], yc[d, n] = h, c
    if layout:
        y, yh, yc = y.transpose(2, 0, 1, 3), yh.transpose(1, 0, 2), yc.transpose(1, 0, 2)
    return [a.astype(F32) for a in (y, yh, yc)]


def _check(session, model, feeds, want=None):
    if want is None:
        with np.errstate(all="ignore"):
            want = reference(model, feeds)
    got = run_once(session, model, feeds)
    assert_close(got, want, rtol=1e-4, atol=1e-5)


# (seq, batch, input, hidden): hidden on and off the 8 / 16 lane widths and the 16 / 32 column panels, 1; batch 1,
# partial 4 / 8-row blocks, and past the panel kernel's 32 rows
SHAPES = [
    (3, 1, 4, 1),
    (5, 1, 6, 7),
    (4, 2, 5, 16),
    (6, 3, 9, 17),
    (3, 5, 8, 37),
    (4, 4, 16, 64),
    (3, 9, 6, 13),
    (2, 17, 4, 24),
    (2, 32, 3, 5),
    (2, 33, 5, 8),
]


@pytest.mark.parametrize("shape", SHAPES, ids=[f"T{s}B{b}I{i}H{h}" for s, b, i, h in SHAPES])
@pytest.mark.parametrize("const", [True, False], ids=["const", "inputs"])
def test_lstm_default_activations(session, shape, const):
    seq, batch, inp, hid = shape
    model, feeds, _ = _case("LSTM", seq, batch, inp, hid, const=const, seed=hid + batch)
    _check(session, model, feeds)


_VARIANTS = [
    dict(dirs=2, direction="bidirectional", h0=True, c0=True),
    dict(direction="reverse", h0=True),
    dict(peep=True, c0=True),
    dict(dirs=2, direction="bidirectional", peep=True, h0=True, c0=True, layout=1),
    dict(layout=1, h0=True, c0=True),
    dict(bias=False),
]


@pytest.mark.parametrize("hid", [1, 13, 16, 40])
@pytest.mark.parametrize("variant", range(len(_VARIANTS)))
@pytest.mark.parametrize("const", [True, False], ids=["const", "inputs"])
def test_lstm_variants_against_reference(session, hid, variant, const):
    kw = dict(_VARIANTS[variant])
    model, feeds, _ = _case("LSTM", 5, 3, 6, hid, const=const, seed=variant * 7 + hid, **kw)
    _check(session, model, feeds)


_EQ_VARIANTS = [
    dict(lens=np.array([5, 2, 0, 4], np.int32)),
    dict(lens=np.array([3, 5, 1, 5], np.int32), dirs=2, direction="bidirectional", peep=True, h0=True, c0=True),
    dict(lens=np.array([2, 4, 5, 1], np.int32), direction="reverse", layout=1, h0=True, c0=True),
    dict(clip=0.6, peep=True),
    dict(clip=2.0, direction="reverse", input_forget=1, c0=True),
    dict(input_forget=1, peep=True, h0=True, c0=True),
]


@pytest.mark.parametrize("hid", [1, 9, 16, 33])
@pytest.mark.parametrize("variant", range(len(_EQ_VARIANTS)))
def test_lstm_lens_clip_input_forget(session, hid, variant):
    """Attributes onnx.reference ignores: ONNX's equations are the oracle (clip and input_forget run the general
    path, sequence_lens the fused one)."""
    kw = dict(_EQ_VARIANTS[variant])
    attrs = {k: kw[k] for k in ("clip", "input_forget", "direction") if k in kw}
    model, feeds, tensors = _case("LSTM", 5, 4, 7, hid, seed=variant + hid, **kw)
    _check(session, model, feeds, want=_lstm_equations(tensors, attrs, kw.get("layout", 0)))


def test_lstm_equations_oracle_matches_reference(session):
    """The float64 oracle above agrees with onnx.reference where both apply."""
    model, feeds, tensors = _case(
        "LSTM", 4, 3, 5, 6, dirs=2, direction="bidirectional", peep=True, h0=True, c0=True, layout=1, seed=3
    )
    want = reference(model, feeds)
    assert_close(_lstm_equations(tensors, dict(direction="bidirectional"), 1), want, rtol=1e-5, atol=1e-6)


def test_lstm_general_path_activations(session):
    """Non-default activations (general path) next to the default ones, with sequence_lens."""
    model, feeds, _ = _case("LSTM", 4, 2, 5, 19, activations=["Sigmoid", "Tanh", "Tanh"], seed=5)
    _check(session, model, feeds)
    model, feeds, _ = _case("LSTM", 4, 2, 5, 19, activations=["HardSigmoid", "Tanh", "Relu"], seed=5)
    m0, f0, _ = _case("LSTM", 4, 2, 5, 19, seed=5)
    got, base = run_once(session, model, feeds), run_once(session, m0, f0)
    assert not np.allclose(got[0], base[0])  # the attribute is honoured, not dropped on the fast path


@pytest.mark.parametrize("hid", [7, 16, 37])
@pytest.mark.parametrize("const", [True, False], ids=["const", "inputs"])
def test_lstm_edge_values_in_x(session, hid, const):
    """NaN, +-inf and huge magnitudes in X: NaN spreads through its own batch row only, inf and 1e30 saturate."""
    model, feeds, _ = _case("LSTM", 6, 4, 5, hid, const=const, h0=True, c0=True, peep=True, seed=hid)
    x = feeds[0]
    x[1, 0, 2] = np.nan
    x[2, 1, 0] = np.inf
    x[3, 2, 4] = -np.inf
    x[0, 3, :2] = [3e30, -1e30]
    x[4, 3, 1] = 3e4
    x[5, 2, 3] = 1e-40  # denormal
    _check(session, model, feeds)


@pytest.mark.parametrize("op", ["GRU", "RNN"])
@pytest.mark.parametrize("hid", [1, 16, 23])
@pytest.mark.parametrize("batch", [3, 11, 40])
@pytest.mark.parametrize("const", [True, False], ids=["const", "inputs"])
def test_gru_rnn_transposed_r(session, op, hid, batch, const):
    """GRU / RNN through the same recurrent products (R packed or transposed once for a constant R, at run time
    otherwise; GRU's h block as its own product without linear_before_reset)."""
    for kw in (dict(dirs=2, direction="bidirectional", h0=True), dict(layout=1), dict(direction="reverse")):
        extra = dict(linear_before_reset=1) if op == "GRU" and kw.get("layout") else {}
        model, feeds, _ = _case(op, 5, batch, 6, hid, const=const, seed=hid, **kw, **extra)
        _check(session, model, feeds)


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)


def _converted(model, src, dst):
    """``model`` with its ``src`` tensors (initializers, inputs, outputs) as ``dst`` (sequence_lens stays int32)."""
    out = type(model)()
    out.CopyFrom(model)
    for init in out.graph.initializer:
        a = numpy_helper.to_array(init)
        if a.dtype == src:
            init.CopyFrom(numpy_helper.from_array(a.astype(dst), init.name))
    for v in list(out.graph.input) + list(out.graph.output):
        if v.type.tensor_type.elem_type == helper.np_dtype_to_tensor_dtype(np.dtype(src)):
            v.type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dst))
    return out


_HALF_CASES = [
    ("LSTM", dict()),
    ("LSTM", dict(dirs=2, direction="bidirectional", h0=True, c0=True, peep=True)),
    ("LSTM", dict(layout=1, h0=True, c0=True)),
    ("LSTM", dict(direction="reverse", bias=False, h0=True)),
    ("GRU", dict()),
    ("GRU", dict(dirs=2, direction="bidirectional", h0=True, linear_before_reset=1)),
    ("RNN", dict(layout=1)),
    ("RNN", dict(dirs=2, direction="bidirectional", h0=True)),
]


@pytest.mark.parametrize("case", range(len(_HALF_CASES)))
@pytest.mark.parametrize("hid", [5, 16])
@pytest.mark.parametrize("const", [True, False], ids=["const", "inputs"])
def test_float16_runs_the_float32_kernel_on_widened_data(session, case, hid, const):
    """float16 X / W / R / B / states: the float32 kernel on the exactly widened values, each output rounded to
    float16 once. So the result is the float32 model's on the same values, rounded to float16 (within one float16
    step: the float32 sums may land on the other side of a rounding boundary), and close to onnx.reference's
    float16 evaluation, which rounds after every operation."""
    op, kw = _HALF_CASES[case]
    model, feeds, _ = _case(op, 4, 3, 6, hid, const=const, seed=hid + case, **kw)
    half = _converted(model, F32, np.float16)
    hfeeds = [f.astype(np.float16) if f.dtype == F32 else f for f in feeds]
    widened = [f.astype(F32) if f.dtype == np.float16 else f for f in hfeeds]
    want32 = reference(_converted(half, np.float16, F32), widened)
    got = run_once(session, half, hfeeds)
    assert [g.dtype for g in got] == [np.float16] * len(got)
    for g, w in zip(got, want32, strict=True):
        step = np.spacing(np.abs(w).astype(np.float16)).astype(F32)  # one float16 step at each value
        assert np.all(np.abs(g.astype(F32) - w) <= step + 1e-7), float(np.max(np.abs(g.astype(F32) - w) / step))
    with np.errstate(all="ignore"):
        want16 = reference(half, hfeeds)
    assert_close([g.astype(F32) for g in got], [w.astype(F32) for w in want16], rtol=1e-2, atol=2e-3)
