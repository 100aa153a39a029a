"""Helpers shared by the async tests: the event loops they run on, runs of a chosen duration, polling with
deadlines, leak checks against the native live counters, and a ticker that measures how long the loop is blocked."""

from __future__ import annotations

import math
import time

import anyio
import numpy as np
import pytest

import geasync as ga
from conftest import BACKENDS, TensorProto, helper, live, make_model  # noqa: F401  (BACKENDS re-exported)

# Keys that depend on the loop's completion hub (one queue per loop, created lazily), not on the test's requests.
HUB_KEYS = ("completion_queues",)


def chain_model(n: int, k: int):
    """y = x @ w @ w ... (k MatMuls of n x n): a run whose duration the test can choose (k=4, n=256: ~30 ms)."""
    nodes, prev = [], "x"
    for i in range(k):
        nodes.append(helper.make_node("MatMul", [prev, "w"], [f"m{i}"], name=f"mm{i}"))
        prev = f"m{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    return make_model(nodes, [("x", TensorProto.FLOAT, [n, n]), ("w", TensorProto.FLOAT, [n, n])],
                      [("y", TensorProto.FLOAT, [n, n])])


_PER_MATMUL: dict = {}


def slow_chain(target: float = 0.05):
    """(model, n): a MatMul chain (y = x @ I @ I ... = x) whose run takes about ``target`` seconds on this build.

    The cost of one MatMul is measured once per process, so tests that need a request to stay in flight for a
    while do not depend on how fast the runtime happens to be."""
    if not _PER_MATMUL:
        for n in (256, 512, 1024):
            x = np.random.default_rng(0).random((n, n), dtype=np.float32)
            w = np.eye(n, dtype=np.float32)
            with ga.Session() as s:
                s.add_graph(1, ga.Graph.from_onnx(chain_model(n, 4)))
                s.run_graph(1, [x, w])
                best = float("inf")
                for _ in range(3):
                    t0 = time.perf_counter()
                    s.run_graph(1, [x, w])
                    best = min(best, time.perf_counter() - t0)
            _PER_MATMUL[n] = max(best / 4, 1e-7)
            if _PER_MATMUL[n] * 100 >= 0.2:
                break
    for n, per in _PER_MATMUL.items():
        if per * 200 >= target or n == max(_PER_MATMUL):
            return chain_model(n, min(200, max(2, math.ceil(target / per)))), n
    raise AssertionError("unreachable")


def counters_diff(before: dict, after: dict, ignore=HUB_KEYS) -> dict:
    return {k: (before[k], after.get(k)) for k in before if k not in ignore and after.get(k) != before[k]}


async def wait_until(pred, what: str, timeout: float = 20.0, interval: float = 0.005) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        await anyio.sleep(interval)


async def wait_for_counters(baseline: dict, timeout: float = 20.0, ignore=HUB_KEYS) -> None:
    """Polls the native live counters (after gc) until they are back at ``baseline`` (``ignore``d keys aside)."""
    deadline = time.monotonic() + timeout
    while True:
        d = counters_diff(baseline, live(), ignore)
        if not d:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"native live counters did not return to baseline (before, after): {d}")
        await anyio.sleep(0.01)


class Ticker:
    """A task that ticks every ``period`` seconds and records the largest gap between ticks: the loop's latency."""

    def __init__(self, period: float = 0.002) -> None:
        self.period = period
        self.ticks = 0
        self.max_gap = 0.0
        self._stop = False

    async def run(self) -> None:
        self._last = time.perf_counter()
        while not self._stop:
            await anyio.sleep(self.period)
            now = time.perf_counter()
            self.max_gap = max(self.max_gap, now - self._last)
            self._last = now
            self.ticks += 1

    def reset(self) -> float:
        """Measures from now on (the gap under way counts from now); returns the time."""
        self._last = now = time.perf_counter()
        self.max_gap = 0.0
        return now

    def stop(self) -> None:
        self._stop = True
