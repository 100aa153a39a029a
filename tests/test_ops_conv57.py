"""Dilated dense convs whose weights pass 1 MB (channels-last path, one region per kernel tap, the taps' products
added to the outputs): 3x3 at dilations 2 / 3 / 4 / 6 on small maps (DeepLab's ASPP, FCN's dilated layer4) with
odd sizes, asymmetric pads, strides, unequal dilations per axis, 3x2 and 5x5 kernels, a dilated Conv1d, one and
several images, with and without bias, a fused Relu, run-time weights, NaN / inf inputs; each against
onnx.reference. Depthwise 3x3 convs at stride 1 on maps whose rows fill 3/4 of 16-lane chunks or less (the per-channel
rows kernel and the channels-last kernel on AVX-512), float32 and float16, pads, bias, a fused Relu, several images,
NaN / inf inputs. The last test reruns the file with the fallback instruction sets (GEASYNC_TWIN_SIMD)."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from conftest import make_model  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_cases import check_twin, conv_model, reference, rerun_file_with_instruction_set, run_twin  # noqa: E402

RNG = np.random.default_rng(5757)


def _weights(shape):
    fan = int(np.prod(shape[1:]))
    return (RNG.standard_normal(shape) / np.sqrt(fan)).astype(np.float32)


# (x shape, out channels, kernel, strides, dilations, pads); every one has C * taps * M * 4 bytes > 1 MB
_CASES = [
    ((1, 192, 8, 8), 192, [3, 3], [1, 1], [2, 2], [2] * 4),
    ((1, 192, 8, 8), 176, [3, 3], [1, 1], [4, 4], [4] * 4),
    ((2, 160, 7, 9), 208, [3, 3], [1, 1], [2, 3], [2, 1, 3, 2]),
    ((1, 200, 5, 6), 184, [3, 3], [1, 1], [6, 6], [6] * 4),
    ((1, 192, 11, 10), 160, [3, 3], [2, 2], [2, 2], [2, 2, 1, 2]),
    ((3, 144, 9, 6), 256, [3, 2], [1, 1], [3, 4], [3, 4, 2, 1]),
    ((1, 112, 9, 9), 112, [5, 5], [1, 1], [2, 2], [4] * 4),
    ((1, 256, 37), 264, [5], [1], [4], [8, 8]),
    ((2, 256, 4, 4), 256, [3, 3], [1, 1], [2, 2], [2] * 4),
]


@pytest.mark.parametrize("xs,m,k,s,d,pads", _CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_dilated_large_weights(xs, m, k, s, d, pads, bias):
    x = RNG.standard_normal(xs).astype(np.float32)
    w = _weights((m, xs[1], *k))
    b = RNG.standard_normal(m).astype(np.float32) if bias else None
    got = check_twin(*conv_model("Conv", x, w, b, kernel_shape=k, strides=s, dilations=d, pads=pads))[0]
    assert (got < 0).any() and (got > 0).any()


@pytest.mark.parametrize("w_input", [False, True])
def test_fused_relu_and_runtime_weights(w_input):
    x = RNG.standard_normal((2, 192, 7, 7)).astype(np.float32)
    w = _weights((192, 192, 3, 3))
    b = RNG.standard_normal(192).astype(np.float32)
    got = check_twin(*conv_model("Conv", x, w, b, w_input=w_input, relu=not w_input, kernel_shape=[3, 3],
                                 dilations=[2, 2], pads=[2] * 4))[0]
    assert (got > 0).any()
    assert (got >= 0).all() if not w_input else (got < 0).any()


def test_nan_and_inf_inputs():
    # onnx.reference dilates the kernel with zero taps (0 * NaN spreads a NaN to outputs that never read it), so
    # onnxruntime is the oracle here; the finite outputs also against onnx.reference with the non-finite values at 0.
    ort = pytest.importorskip("onnxruntime")
    x = RNG.standard_normal((1, 192, 8, 8)).astype(np.float32)
    x[0, 3, 0, 0] = np.nan
    x[0, 5, 4, 7] = np.inf
    x[0, 6, 7, 2] = -np.inf
    w = _weights((192, 192, 3, 3))
    model, feeds = conv_model("Conv", x, w, kernel_shape=[3, 3], dilations=[2, 2], pads=[2] * 4)
    got = run_twin(model, feeds)[0]
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)
    assert np.isnan(got[0, :, 0, 0]).all() and np.isinf(got[0, :, 4, 7]).all()
    assert np.isfinite(got[0, :, 1, 1]).all()  # (1, 1) reads rows / columns 1 and 3 only
    finite = np.isfinite(got)
    x0 = np.where(np.isfinite(x), x, np.float32(0))
    ref = reference(model, [x0])[0]
    np.testing.assert_allclose(got[finite], ref[finite], rtol=1e-4, atol=1e-4)


# (x shape, pads) of depthwise 3x3 stride 1 convs: 28 / 26 / 14 / 13 columns (the rows kernel), 20 / 17 (channels
# last), N > 1, pads 0 and asymmetric
_DEPTHWISE = [
    ((1, 40, 28, 28), [1] * 4),
    ((2, 24, 14, 14), [1] * 4),
    ((1, 33, 26, 26), [0] * 4),
    ((3, 20, 15, 13), [1, 0, 0, 1]),
    ((1, 48, 20, 20), [1] * 4),
    ((2, 17, 17, 17), [1] * 4),
    ((1, 19, 12, 28), [1, 1, 0, 1]),
]


@pytest.mark.parametrize("xs,pads", _DEPTHWISE)
@pytest.mark.parametrize("bias,relu", [(False, False), (True, True)])
def test_depthwise_3x3(xs, pads, bias, relu):
    c = xs[1]
    x = RNG.standard_normal(xs).astype(np.float32)
    w = _weights((c, 1, 3, 3))
    b = RNG.standard_normal(c).astype(np.float32) if bias else None
    got = check_twin(*conv_model("Conv", x, w, b, relu=relu, kernel_shape=[3, 3], pads=pads, group=c))[0]
    assert (got >= 0).all() if relu else (got < 0).any()
    assert (got > 0).any()


@pytest.mark.parametrize("xs,pads", _DEPTHWISE[:4])
def test_depthwise_3x3_float16(xs, pads):
    c = xs[1]
    x = RNG.standard_normal(xs).astype(np.float16)
    w = _weights((c, 1, 3, 3)).astype(np.float16)
    b = RNG.standard_normal(c).astype(np.float16)
    h = TensorProto.FLOAT16
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], pads=pads, group=c)
    model = make_model([node], [("x", h, list(xs))], [("y", h, None)], initializers=[("w", w), ("b", b)], opset=19)
    got = run_twin(model, {"x": x})[0]
    want = reference(model, [x])[0]
    assert got.dtype == np.float16
    # float16 results: within a couple of float16 steps of onnx.reference's (its sums may round otherwise)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=4e-3, atol=4e-3)


def test_depthwise_3x3_nan_and_inf():
    x = RNG.standard_normal((1, 40, 28, 28)).astype(np.float32)
    x[0, 1, 5, 6] = np.nan
    x[0, 2, 27, 27] = np.inf
    x[0, 3, 0, 14] = -np.inf
    w = _weights((40, 1, 3, 3))
    got = check_twin(*conv_model("Conv", x, w, kernel_shape=[3, 3], pads=[1] * 4, group=40))[0]
    assert np.isnan(got[0, 1, 4:7, 5:8]).all() and np.isfinite(got[0, 1, 8:]).all()
    assert np.isinf(got[0, 2, 27, 27]) and np.isinf(got[0, 3, 0, 14])


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)
