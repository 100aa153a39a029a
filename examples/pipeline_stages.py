"""Concurrent pipeline stages on geasync: preprocess -> infer -> postprocess, connected by anyio memory object streams.

    python examples/pipeline_stages.py                      # asyncio
    python examples/pipeline_stages.py --backend uvloop     # or trio
    python examples/pipeline_stages.py --items 2000 --workers 8

Each stage is a group of tasks reading from one bounded stream and writing to the next, so a slow stage applies
backpressure to the ones before it. The infer stage awaits ``Session.run_graph_async`` on the example MLP
(examples/models/mlp.onnx): requests from all its workers are in flight in GE at once, and the event loop is never
blocked while they run. Works under asyncio, uvloop and trio.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
from dataclasses import dataclass, field

import anyio
import numpy as np

import geasync as ga

MODEL = pathlib.Path(__file__).resolve().parent / "models" / "mlp.onnx"
GRAPH_ID = 1


@dataclass
class Item:
    index: int
    image: np.ndarray  # a raw 28x28 uint8 "image"
    features: np.ndarray | None = None  # (1, 784) float32, after preprocess
    probs: np.ndarray | None = None  # (10,) float32, after infer


@dataclass
class Summary:
    processed: int = 0
    labels: dict[int, int] = field(default_factory=dict)  # class -> count
    seconds: float = 0.0

    @property
    def throughput(self) -> float:
        return self.processed / self.seconds if self.seconds else 0.0


async def source(n_items: int, seed: int, out: anyio.abc.ObjectSendStream[Item]) -> None:
    rng = np.random.default_rng(seed)
    async with out:
        for i in range(n_items):
            await out.send(Item(i, rng.integers(0, 256, (28, 28), dtype=np.uint8)))


async def preprocess(inp: anyio.abc.ObjectReceiveStream[Item], out: anyio.abc.ObjectSendStream[Item]) -> None:
    async with inp, out:
        async for item in inp:
            x = item.image.astype(np.float32) / 255.0
            item.features = ((x - 0.1307) / 0.3081).reshape(1, 784)
            await out.send(item)


async def infer(session: ga.Session, inp: anyio.abc.ObjectReceiveStream[Item],
                out: anyio.abc.ObjectSendStream[Item]) -> None:
    async with inp, out:
        async for item in inp:
            assert item.features is not None, "preprocess sets the features"
            (probs,) = await session.run_graph_async(GRAPH_ID, [item.features])
            item.probs = probs.numpy()[0].copy()  # copy: the output Tensor's memory goes with it
            item.features = None
            await out.send(item)


async def postprocess(inp: anyio.abc.ObjectReceiveStream[Item], summary: Summary) -> None:
    async with inp:
        async for item in inp:
            assert item.probs is not None and abs(float(item.probs.sum()) - 1.0) < 1e-4, "softmax must sum to 1"
            label = int(item.probs.argmax())
            summary.labels[label] = summary.labels.get(label, 0) + 1
            summary.processed += 1


async def run_pipeline(n_items: int = 1000, workers: int = 4, buffer: int = 64, seed: int = 0) -> Summary:
    summary = Summary()
    send_raw, recv_raw = anyio.create_memory_object_stream[Item](buffer)
    send_pre, recv_pre = anyio.create_memory_object_stream[Item](buffer)
    send_inf, recv_inf = anyio.create_memory_object_stream[Item](buffer)
    async with ga.Session(max_in_flight=256) as session:
        session.add_graph(GRAPH_ID, ga.Graph.from_onnx(MODEL))
        # The first run compiles the graph for (1, 784) inputs; do it before the clock starts.
        await session.run_graph_async(GRAPH_ID, [np.zeros((1, 784), np.float32)])
        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            tg.start_soon(source, n_items, seed, send_raw)
            # Each worker owns a clone of its streams; a stream closes when its last clone does.
            for _ in range(2):
                tg.start_soon(preprocess, recv_raw.clone(), send_pre.clone())
            for _ in range(workers):
                tg.start_soon(infer, session, recv_pre.clone(), send_inf.clone())
            tg.start_soon(postprocess, recv_inf.clone(), summary)
            for s in (recv_raw, send_pre, recv_pre, send_inf, recv_inf):
                s.close()  # the originals: only the clones remain
        summary.seconds = time.perf_counter() - t0
        stats = session.statistics()
    assert stats.in_flight == 0 and stats.pinned_bytes == 0, stats
    assert stats.completed == n_items + 1 and stats.failed == 0, stats
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["asyncio", "uvloop", "trio"], default="asyncio")
    parser.add_argument("--items", type=int, default=1000, help="items to push through the pipeline")
    parser.add_argument("--workers", type=int, default=4, help="concurrent infer tasks")
    parser.add_argument("--buffer", type=int, default=64, help="capacity of each stream between stages")
    args = parser.parse_args(argv)

    if args.backend == "uvloop":
        backend, options = "asyncio", {"use_uvloop": True}
    else:
        backend, options = args.backend, {}
    summary = anyio.run(run_pipeline, args.items, args.workers, args.buffer, backend=backend,
                        backend_options=options)

    print(f"geasync {ga.__version__} on backend {ga.current_backend()!r}, event loop: {args.backend}")
    print(f"pipeline: preprocess x2 -> infer x{args.workers} (run_graph_async, {MODEL.name}) -> postprocess")
    print(f"processed {summary.processed} items in {summary.seconds:.3f} s "
          f"({summary.throughput:.0f} items/s)")
    top = sorted(summary.labels.items(), key=lambda kv: -kv[1])[:3]
    print("most frequent classes: " + ", ".join(f"{label} ({count})" for label, count in top))
    return 0 if summary.processed == args.items else 1


if __name__ == "__main__":
    sys.exit(main())
