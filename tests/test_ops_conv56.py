"""Dense (not depthwise) float32 convs on maps whose padded input planes exceed the direct kernel's L2 band (the
kernel then runs all its channel blocks over one band of output rows before the next): 3x3 at stride 2 and 1,
5x5, dilated, odd sizes and asymmetric pads, N = 1 and 2, with bias and a fused Relu, against onnx.reference. The
last test reruns the file with the fallback instruction sets (GEASYNC_TWIN_SIMD)."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx_cases import check_twin, conv_model, rerun_file_with_instruction_set  # noqa: E402

RNG = np.random.default_rng(5656)


def _weights(shape):
    fan = int(np.prod(shape[1:]))
    return (RNG.standard_normal(shape) / np.sqrt(fan)).astype(np.float32)


# (x shape, out channels, kernel, stride, pads, dilation)
_CASES = [
    ((1, 64, 128, 128), 128, 3, 2, [1] * 4, 1),  # many bands (4 output rows each), 16 channel blocks
    ((1, 32, 97, 95), 48, 3, 2, [1] * 4, 1),  # odd sizes, a partial channel block
    ((2, 24, 90, 91), 40, 3, 2, [0, 1, 1, 0], 1),  # two images, asymmetric pads
    ((1, 48, 65, 200), 64, 3, 2, [1] * 4, 1),  # wide rows: a partial 16-column chunk per row
    ((1, 16, 120, 118), 24, 5, 1, [2] * 4, 1),  # stride 1, 5x5 (not Winograd)
    ((2, 20, 88, 90), 19, 3, 1, [2] * 4, 2),  # stride 1, dilation 2
    ((1, 8, 40, 40), 16, 3, 2, [1] * 4, 1),  # one band (the planes fit)
]


@pytest.mark.parametrize("xs,m,k,s,pads,d", _CASES)
@pytest.mark.parametrize("bias,relu", [(False, False), (True, True)])
def test_dense_conv_bands(xs, m, k, s, pads, d, bias, relu):
    x = RNG.standard_normal(xs).astype(np.float32)
    w = _weights((m, xs[1], k, k))
    b = RNG.standard_normal(m).astype(np.float32) if bias else None
    got = check_twin(*conv_model("Conv", x, w, b, relu=relu, kernel_shape=[k, k], strides=[s, s], pads=pads,
                                 dilations=[d, d]))[0]
    assert (got >= 0).all() if relu else (got < 0).any()
    assert (got > 0).any()


def test_dense_conv_bands_runtime_weights():
    """Weights as a graph input (packed per run), the band path all the same."""
    x = RNG.standard_normal((1, 32, 100, 100)).astype(np.float32)
    w = _weights((64, 32, 3, 3))
    got = check_twin(*conv_model("Conv", x, w, w_input=True, kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4))[0]
    assert got.shape == (1, 64, 50, 50) and (got < 0).any()


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)
