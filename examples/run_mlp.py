"""Runs the example MLP on geasync's default backend (the native twin when no NPU is present) and prints its outputs,
then serves a burst of concurrent requests through the async API and checks them against the synchronous results.

    python examples/run_mlp.py
"""

from __future__ import annotations

import pathlib
import time

import anyio
import numpy as np

import geasync as ga

MODEL = pathlib.Path(__file__).resolve().parent / "models" / "mlp.onnx"


def run_once(x: np.ndarray) -> np.ndarray:
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(MODEL))
        (y,) = s.run_graph(1, [x])
        summary = s.get_compiled_graph_summary(1)
        probs = y.numpy().copy()
    print(f"geasync {ga.__version__} on backend {ga.current_backend()!r}: ran {MODEL.name} on a batch of {x.shape[0]}")
    print(f"output shape {probs.shape}, dtype {probs.dtype}; compiled graph static={summary.is_static}")
    np.set_printoptions(precision=4, suppress=True)
    for i, row in enumerate(probs):
        print(f"  sample {i}: class {int(row.argmax())} (p={row.max():.4f})  probs={row}")
    assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-5), "softmax rows must sum to 1"
    return probs


async def serve_burst(batches: list[np.ndarray]) -> list[np.ndarray]:
    """Many concurrent requests on one session: each awaits its own RunGraphAsync without blocking the loop."""
    results: list[np.ndarray | None] = [None] * len(batches)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(MODEL))

        async def handle(i: int) -> None:
            (y,) = await s.run_graph_async(1, [batches[i]])
            results[i] = y.numpy()

        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(len(batches)):
                tg.start_soon(handle, i)
        elapsed = time.perf_counter() - t0
        stats = s.statistics()
    print(f"async: {len(batches)} concurrent requests in {elapsed:.3f} s ({len(batches) / elapsed:,.0f} req/s); "
          f"completed={stats.completed} failed={stats.failed} in_flight={stats.in_flight}")
    return results  # type: ignore[return-value]


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.random((4, 784), dtype=np.float32)
    probs = run_once(x)
    batches = [rng.random((4, 784), dtype=np.float32) for _ in range(500)]
    batches[0] = x
    results = anyio.run(serve_burst, batches)
    np.testing.assert_allclose(results[0], probs, rtol=1e-6, atol=1e-7)
    print("async results match the synchronous run")


if __name__ == "__main__":
    main()
