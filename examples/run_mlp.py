"""Runs the example MLP on geasync's default backend (the native twin when no NPU is present) and prints its outputs.

    python examples/run_mlp.py
"""

from __future__ import annotations

import pathlib

import numpy as np

import geasync as ga

MODEL = pathlib.Path(__file__).resolve().parent / "models" / "mlp.onnx"


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.random((4, 784), dtype=np.float32)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(MODEL))
        (y,) = s.run_graph(1, [x])
        probs = y.numpy()
        summary = s.get_compiled_graph_summary(1)
    print(f"geasync {ga.__version__} on backend {ga.current_backend()!r}: ran {MODEL.name} on a batch of {x.shape[0]}")
    print(f"output shape {probs.shape}, dtype {probs.dtype}; compiled graph static={summary.is_static}")
    np.set_printoptions(precision=4, suppress=True)
    for i, row in enumerate(probs):
        print(f"  sample {i}: class {int(row.argmax())} (p={row.max():.4f})  probs={row}")
    assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-5), "softmax rows must sum to 1"


if __name__ == "__main__":
    main()
