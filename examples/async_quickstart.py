"""The README's async example, runnable: 1000 concurrent RunGraphAsync requests, a stream run awaited with
synchronize_async, and GE's run-mode exclusivity, under asyncio, uvloop or trio.

    python examples/async_quickstart.py [asyncio|uvloop|trio]
"""

from __future__ import annotations

import sys

import anyio
import numpy as np

import geasync as ga

async def main() -> None:
    async with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp())
        xs = [np.random.rand(8, 784).astype(np.float32) for _ in range(1000)]
        outs: list[list[ga.Tensor]] = [[] for _ in xs]

        async def one(i: int) -> None:
            outs[i] = await s.run_graph_async(1, [xs[i]])

        async with anyio.create_task_group() as tg:  # 1000 in flight, bounded by the session
            for i in range(len(xs)):
                tg.start_soon(one, i)
        async with ga.Stream() as st:
            s.add_graph(2, ga.samples.mlp())
            ys = s.run_graph_with_stream_async(2, st, [xs[0]])  # enqueued; valid after the stream is done
            await st.synchronize_async()                       # no thread blocked while waiting
            np.testing.assert_allclose(ys[0].to_host().numpy(), outs[0][0].numpy(), rtol=1e-6)
        print(f"1000 async runs and a stream run done: {s.statistics()}")
        try:
            s.run_graph(1, [xs[0]])
        except ga.ExecutionModeError as exc:
            print(f"as expected: {type(exc).__name__}: {exc.error_message.split(' graph 1 ', 1)[0]}")


if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else "asyncio"
    if backend == "uvloop":
        anyio.run(main, backend="asyncio", backend_options={"use_uvloop": True})
    else:
        anyio.run(main, backend=backend)
