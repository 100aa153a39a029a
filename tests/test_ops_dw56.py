"""Depthwise convs at stride 2 on small maps (under 12 output columns: EfficientNet's 5x5 on 14x14 to 7x7, MobileNet's
3x3 to 4x4 / 7x7, 7x7 and 11x11 kernels): odd and even channel counts (the kernel takes channels in pairs, a pair
may span two images), odd map sizes, symmetric / one-sided / oversized pads, non-square kernels, bias, fused Relu
and BatchNormalization + SiLU / Relu, against onnx.reference; the AVX-512 path against the AVX2 one bit for bit (the
same per-output order: bias, then the taps in window order, one FMA each); and the whole file again with the twin
capped at AVX2 and at the baseline."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from conftest import make_model  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_cases import (  # noqa: E402
    assert_close,
    check_twin,
    conv_model,
    reference,
    rerun_file_with_instruction_set,
    run_twin,
    script_output_per_instruction_set,
)

RNG = np.random.default_rng(5656)
F = TensorProto.FLOAT

# (x shape, kernel (kh, kw), pads [top, left, bottom, right])
_SHAPES = [
    ((1, 672, 14, 14), (5, 5), [2] * 4),
    ((1, 481, 14, 14), (5, 5), [2] * 4),
    ((2, 33, 13, 15), (3, 3), [1] * 4),
    ((3, 5, 7, 7), (3, 3), [1] * 4),
    ((1, 385, 14, 15), (7, 7), [3] * 4),
    ((1, 301, 20, 20), (5, 5), [2] * 4),
    ((2, 7, 28, 21), (3, 3), [1] * 4),
    ((1, 16, 15, 15), (3, 3), [0] * 4),
    ((1, 11, 16, 15), (3, 3), [0, 1, 1, 0]),
    ((1, 1031, 13, 12), (5, 5), [2, 0, 1, 2]),
    ((1, 8, 9, 9), (3, 3), [3] * 4),
    ((1, 8, 21, 21), (11, 11), [5] * 4),
    ((1, 10, 12, 17), (5, 3), [2, 1, 2, 1]),
    ((2, 3, 9, 13), (1, 3), [0, 1, 0, 1]),
    ((1, 40, 4, 4), (5, 5), [2] * 4),
    ((1, 96, 14, 14), (5, 5), [2] * 4),
]


def _weights(shape):
    fan = int(np.prod(shape[1:]))
    return (RNG.standard_normal(shape) / np.sqrt(fan)).astype(np.float32)


def _out_len(n, k, p0, p1):
    return (n + p0 + p1 - k) // 2 + 1


@pytest.mark.parametrize("xs,k,pads", _SHAPES)
@pytest.mark.parametrize("bias,relu", [(False, False), (True, False), (True, True)])
def test_depthwise_s2(xs, k, pads, bias, relu):
    c = xs[1]
    x = RNG.standard_normal(xs).astype(np.float32)
    w = _weights((c, 1, *k))
    b = RNG.standard_normal(c).astype(np.float32) if bias else None
    got = check_twin(*conv_model("Conv", x, w, b, relu=relu, kernel_shape=list(k), strides=[2, 2], pads=pads,
                                 group=c))[0]
    oh, ow = _out_len(xs[2], k[0], pads[0], pads[2]), _out_len(xs[3], k[1], pads[1], pads[3])
    assert got.shape == (xs[0], c, oh, ow)
    assert (got >= 0).all() if relu else (got < 0).any()
    assert (got > 0).any()


def _bn_model(x, w, b, act, k, pads):
    """Conv + BatchNormalization (folded into the Conv) + act (SiLU as Sigmoid -> Mul, or Relu)."""
    m = w.shape[0]
    r = np.random.default_rng(m)
    inits = [("w", w), ("b", b), ("sc", r.uniform(0.5, 1.5, m).astype(np.float32)),
             ("sh", r.standard_normal(m).astype(np.float32)), ("mu", r.standard_normal(m).astype(np.float32)),
             ("var", r.uniform(0.5, 2, m).astype(np.float32))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c0"], kernel_shape=list(k), strides=[2, 2], pads=pads,
                              group=m),
             helper.make_node("BatchNormalization", ["c0", "sc", "sh", "mu", "var"], ["c"])]
    if act == "SiLU":
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    else:
        nodes.append(helper.make_node(act, ["c"], ["y"]))
    return make_model(nodes, [("x", F, list(x.shape))], [("y", F, None)], initializers=inits, opset=19)


@pytest.mark.parametrize("xs,k,pads", [((1, 672, 14, 14), (5, 5), [2] * 4), ((2, 19, 14, 13), (3, 3), [1] * 4),
                                       ((1, 385, 15, 15), (7, 7), [3] * 4)])
@pytest.mark.parametrize("act", ["SiLU", "Relu"])
def test_depthwise_s2_bn_activation(xs, k, pads, act):
    c = xs[1]
    x = (2 * RNG.standard_normal(xs)).astype(np.float32)
    w = _weights((c, 1, *k))
    b = RNG.standard_normal(c).astype(np.float32)
    model = _bn_model(x, w, b, act, k, pads)
    got = run_twin(model, {"x": x})
    assert_close(got, reference(model, [x]), 1e-4, 1e-4)
    y = got[0]
    assert (y > 0.5).any()
    assert (y < 0).any() if act == "SiLU" else (y >= 0).all() and (y == 0).any()


_SCRIPT = r"""
import hashlib, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from onnx_cases import conv_model, run_twin
rng = np.random.default_rng(77)
for xs, k, pads in [((1, 672, 14, 14), (5, 5), [2] * 4), ((2, 33, 13, 15), (3, 3), [1] * 4),
                    ((1, 385, 14, 15), (7, 7), [3] * 4), ((1, 1031, 13, 12), (5, 5), [2, 0, 1, 2])]:
    c = xs[1]
    x = rng.standard_normal(xs).astype(np.float32)
    w = (rng.standard_normal((c, 1, *k)) / 5).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    y = run_twin(*conv_model("Conv", x, w, b, kernel_shape=list(k), strides=[2, 2], pads=pads, group=c))[0]
    print(hashlib.sha256((y + np.float32(0)).tobytes()).hexdigest())  # (+0: -0 and +0 alike)
"""


def test_avx512_and_avx2_give_the_same_bits():
    outs = script_output_per_instruction_set(_SCRIPT, __file__, isas=("avx512", "avx2"))
    assert len(outs["avx512"].split()) == 4
    assert outs["avx512"] == outs["avx2"]


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa, select="not avx512_and_avx2")
