"""Adversarial tests, part 4: event loops stopped and closed under a session's waiting requests.

A request waits (for a graph's first compile, a session slot, a dynamic-shape graph's cap, or in a Batcher) on an
asyncio or uvloop loop that is stopped, maybe run again, maybe closed, while other loops in other threads use the same
session. A stopped loop must not lose its requests (run again, they complete); a closed one gives them up, and what
they were granted (a compile's turn, a slot) passes on: a fresh loop's request completes in bounded time, aclose()
returns, and nothing is left in flight, pinned read-only or running in a thread. Each scenario runs in a fresh
interpreter (a hang, or a task the collector frees in a later test, stays inside it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
LOOPS = ["asyncio", "uvloop"]  # trio runs end only once their tasks have: there is no closed run to strand a task

_PRELUDE = """
import asyncio, gc, random, sys, threading, time, warnings
warnings.simplefilter("ignore")
import numpy as np
import geasync as ga
from conftest import add_model

reported = []
sys.unraisablehook = lambda args: reported.append((args.exc_type.__name__, str(args.exc_value)))

def new_loop():
    if LOOP == "uvloop":
        import uvloop
        return uvloop.new_event_loop()
    return asyncio.new_event_loop()

def run_one_iteration(loop):
    # what is ready now runs (e.g. a wake-up sent from another thread), then the loop stops: the tasks it woke
    # have not taken their next step
    loop.call_soon(loop.stop)
    loop.run_forever()

def finish(session, graphs, threads_before):
    async def fresh():
        outs = []
        for gid, shape in graphs:
            x = np.full(shape, 2.0, np.float32)
            outs.append((await session.run_graph_async(gid, [x, x], timeout=15))[0].numpy())
        await asyncio.wait_for(session.aclose(), 15)
        return outs
    t0 = time.monotonic()
    outs = asyncio.run(fresh())
    took = time.monotonic() - t0
    assert all(np.array_equal(o, np.full(o.shape, 4.0, np.float32)) for o in outs), outs
    def left():  # geasync's reaper thread stays for the process (started with the first loop that went away)
        return sorted(t.name for t in threading.enumerate()
                      if t.ident not in threads_before and t.name != "geasync-reaper")
    deadline = time.monotonic() + 10
    while left() and time.monotonic() < deadline:
        time.sleep(0.01)  # a closed loop's executor threads finish on their own
    return took, session.statistics().in_flight, len(left()), left()
"""


def run_isolated(code: str, tmp_path: Path, timeout: float = 90.0) -> str:
    """Runs ``code`` (after the prelude) in a fresh interpreter outside the source tree; a hang fails the test."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    try:
        r = subprocess.run([sys.executable, "-c", _PRELUDE + textwrap.dedent(code)], capture_output=True, text=True,
                           timeout=timeout, env=env, cwd=str(tmp_path))
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"hung for {timeout} s; output so far:\n{exc.stdout}\n{exc.stderr}")
    assert r.returncode == 0, f"exit status {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


@pytest.mark.parametrize("loop", LOOPS)
def test_queued_at_the_compile_gate_when_the_holders_loop_is_closed(loop, tmp_path):
    """A request already queued at a graph's first-compile gate (on a live loop in another thread) when the turn's
    holder, whose compile ended while its loop was stopped, has its loop closed: only a request arriving after the
    close used to pass the turn on, so the queued one (and aclose()) waited for good."""
    code = """
    LOOP = "LOOP_KIND"
    threads_before = {t.ident for t in threading.enumerate()}
    s = ga.Session(max_in_flight=4)
    s.add_graph(1, ga.Graph.from_onnx(add_model((1, 16))))
    a = np.ones((1, 16), np.float32)
    l1 = new_loop()
    kept = l1.create_task(s.run_graph_async(1, [a, a]))  # kept by the application: never collected
    run_one_iteration(l1)  # it holds the turn, its compile runs in a worker thread
    deadline = time.monotonic() + 10
    while s.statistics().waiting < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # the compile ends while l1 is stopped
    result = {}

    def queued():
        async def go():
            return await s.run_graph_async(1, [a, a], timeout=10)
        try:
            result["out"] = asyncio.run(go())
        except BaseException as exc:
            result["err"] = repr(exc)

    th = threading.Thread(target=queued)
    th.start()
    deadline = time.monotonic() + 10
    while s.statistics().waiting < 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # it queued behind the holder
    l1.close()
    th.join(20)
    assert not th.is_alive() and "out" in result, result
    took, in_flight, extra, names = finish(s, [(1, (1, 16))], threads_before)
    print("ok", in_flight, extra, reported, kept.done(), took < 10, names)
    """
    out = run_isolated(code.replace("LOOP_KIND", loop), tmp_path)
    assert "ok 0 0 [] False True" in out, out


@pytest.mark.parametrize("loop", LOOPS)
def test_slot_delivered_to_a_task_whose_loop_closes_before_its_next_step(loop, tmp_path):
    """The session's only slot is sent to a waiter on a stopped loop; the loop runs one more iteration (the wake-up
    arrives, the task is due to resume) and stops, and is closed: the task never takes the slot. Only a slot still
    in transit at the close used to be taken back; this one was lost for good, and every later request waited."""
    code = """
    LOOP = "LOOP_KIND"
    from asynctools import slow_chain
    threads_before = {t.ident for t in threading.enumerate()}
    model, n = slow_chain(0.3)
    x, w = np.ones((n, n), np.float32), np.eye(n, dtype=np.float32)
    s = ga.Session(max_in_flight=1)
    s.add_graph(1, ga.Graph.from_onnx(model))
    s.add_graph(2, ga.Graph.from_onnx(add_model((1, 16))))
    s.compile_graph(1)
    s.compile_graph(2)
    holding = threading.Event()

    async def hold_the_slot():
        try:
            run = asyncio.ensure_future(s.run_graph_async(1, [x, w]))
            await asyncio.sleep(0)
        finally:
            holding.set()
        await run

    holder = threading.Thread(target=asyncio.run, args=(hold_the_slot(),))
    holder.start()
    holding.wait()
    parked = new_loop()
    task = parked.create_task(s.run_graph_async(1, [x, w]))  # kept by the application
    run_one_iteration(parked)  # parked for the slot
    assert s.statistics().waiting == 1, s.statistics()
    holder.join()  # its run completed: the slot was sent to the stopped loop
    run_one_iteration(parked)  # the wake-up arrives; the task's next step is due, but the loop stops first
    parked.close()
    took, in_flight, extra, names = finish(s, [(2, (1, 16))], threads_before)
    print("ok", in_flight, extra, reported, task.done(), took < 10, names)
    """
    out = run_isolated(code.replace("LOOP_KIND", loop), tmp_path)
    # on uvloop the task may also take its next step in that iteration (and finish): the scenario is then not
    # reproduced, but nothing may be lost either way
    assert "ok 0 0 [] False True" in out or (loop == "uvloop" and "ok 0 0 [] True True" in out), out


@pytest.mark.parametrize("loop", LOOPS)
def test_compile_turn_delivered_to_a_task_whose_loop_closes_before_its_next_step(loop, tmp_path):
    """As above for a graph's first-compile turn: the first request's compile ends and it passes the turn to a
    request queued on a stopped loop, which runs one iteration (the wake-up arrives) and is closed."""
    code = """
    LOOP = "LOOP_KIND"
    threads_before = {t.ident for t in threading.enumerate()}
    s = ga.Session(max_in_flight=4)
    s.add_graph(1, ga.Graph.from_onnx(add_model((1, 16))))
    a = np.ones((1, 16), np.float32)
    first = new_loop()
    t1 = first.create_task(s.run_graph_async(1, [a, a]))
    run_one_iteration(first)  # it holds the turn; its compile runs in a worker thread
    queued = new_loop()
    t2 = queued.create_task(s.run_graph_async(1, [a, a]))  # kept by the application
    run_one_iteration(queued)  # queued at the gate behind the first
    out = first.run_until_complete(asyncio.wait_for(t1, 20))  # the first resumes and passes the turn on
    assert np.array_equal(out[0].numpy(), a + a)
    first.run_until_complete(first.shutdown_default_executor())
    first.close()
    run_one_iteration(queued)  # the turn arrives; the task's next step is due, but the loop stops first
    queued.close()
    took, in_flight, extra, names = finish(s, [(1, (1, 16))], threads_before)
    print("ok", in_flight, extra, reported, t2.done(), took < 10, names)
    """
    out = run_isolated(code.replace("LOOP_KIND", loop), tmp_path)
    # on uvloop the task may also take its next step in that iteration (and finish): the scenario is then not
    # reproduced, but nothing may be lost either way
    assert "ok 0 0 [] False True" in out or (loop == "uvloop" and "ok 0 0 [] True True" in out), out


_STRESS = """
LOOP = "LOOP_KIND"
rng = random.Random(SEED)
threads_before = {t.ident for t in threading.enumerate()}
small = ga.Session(max_in_flight=2)  # requests wait for a session slot
small.add_graph(1, ga.Graph.from_onnx(add_model((1, 16))))
small.compile_graph(1)
dyn = ga.Session(max_in_flight=256)  # a dynamic-shape graph: requests wait under its cap (32 pending)
dyn.add_graph(2, ga.Graph.from_onnx(add_model(("N", 16))))
dyn.compile_graph(2)
inputs, kept, errors = [], [], []
compile_graphs = []

def stop_plan(loop, r):
    how = r.choice(["iterations", "timer", "thread"])
    if how == "iterations":
        def stopper(k):
            loop.stop() if k == 0 else loop.call_soon(stopper, k - 1)
        loop.call_soon(stopper, r.randint(0, 6))
    elif how == "timer":
        loop.call_later(r.uniform(0, 0.01), loop.stop)
    else:
        def from_thread():
            time.sleep(r.uniform(0, 0.01))
            try:
                loop.call_soon_threadsafe(loop.stop)
            except RuntimeError:  # closed already
                pass
        threading.Thread(target=from_thread).start()

def worker(kind, seed, gid):
    try:
        scenario(kind, seed, gid)
    except BaseException as exc:
        errors.append((kind, "worker", repr(exc)))

def on_trio(seed, gid):
    # a trio run (its tasks always resume: a run ends once they have) shares the sessions with the loops closed
    # around it: its requests wait behind theirs for the compile's turn and for slots, and must all complete
    import trio
    r = random.Random(seed)
    arrays = [np.full((1, 16), r.random(), np.float32) for _ in range(6)]
    inputs.extend(arrays)
    outs = [None] * len(arrays)

    async def one(i, gid):
        outs[i] = (await small.run_graph_async(gid, [arrays[i], arrays[i]], timeout=20))[0].numpy()

    async def main():
        async with trio.open_nursery() as nursery:
            for i in range(len(arrays)):
                nursery.start_soon(one, i, gid if i % 2 else 1)
    trio.run(main)
    if not all(np.array_equal(o, a + a) for o, a in zip(outs, arrays)):
        errors.append(("trio", "wrong outputs"))

def scenario(kind, seed, gid):
    if kind == "trio":
        return on_trio(seed, gid)
    r = random.Random(seed)
    loop = new_loop()
    expected = []
    def request():
        if kind in ("compile", "slot"):
            a = np.full((1, 16), r.random(), np.float32)
            inputs.append(a)
            expected.append(a + a)
            return small.run_graph_async(gid if kind == "compile" else 1, [a, a])
        a = np.full((r.randint(1, 4), 16), r.random(), np.float32)
        inputs.append(a)
        expected.append(a + a)
        if kind == "cap":
            return dyn.run_graph_async(2, [a, a])
        return via_batcher(a)
    batcher = None
    if kind == "batcher":
        async def make():
            return ga.Batcher(dyn, 2, max_batch_size=8)
        batcher = loop.run_until_complete(make())
        async def via_batcher(a):
            return await batcher.run([a, a])  # (called on the loop: it binds the batcher to its loop)
    count = {"compile": r.randint(2, 5), "slot": r.randint(3, 8), "cap": r.randint(34, 48), "batcher": 12}[kind]
    tasks = [loop.create_task(request()) for _ in range(count)]
    stop_plan(loop, r)
    loop.run_forever()
    time.sleep(r.uniform(0, 0.03))
    fate = r.choice(["close", "keep", "one_more_then_close", "resume", "resume_later"])
    if fate == "resume_later":
        time.sleep(0.2)  # a stopped loop run again later must not have lost its requests
    if fate.startswith("resume"):
        try:
            outs = loop.run_until_complete(asyncio.wait_for(asyncio.gather(*tasks), 20))
            bad = [i for i, (o, e) in enumerate(zip(outs, expected)) if not np.array_equal(o[0].numpy(), e)]
            if bad:
                errors.append((kind, fate, "wrong outputs", bad))
        except BaseException as exc:
            errors.append((kind, fate, repr(exc)))
        if batcher is not None:
            loop.run_until_complete(batcher.aclose())
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
        return
    if fate == "one_more_then_close":
        run_one_iteration(loop)
    loop.close()
    if fate != "close":
        kept.extend(tasks)  # the application keeps them: only what the session does frees their grants

for round in range(ROUNDS):
    gid = 100 + round
    small.add_graph(gid, ga.Graph.from_onnx(add_model((1, 16))))  # its first async request compiles it
    compile_graphs.append((gid, (1, 16)))
    kinds = ["compile", "compile", "slot", "cap", "batcher", "trio"]
    threads = [threading.Thread(target=worker, args=(k, rng.random(), gid)) for k in kinds]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
        assert not t.is_alive(), "a worker hung"
gc.collect()
took1, in1, _, _ = finish(small, [(1, (1, 16))] + compile_graphs, threads_before)
took2, in2, extra, names = finish(dyn, [(2, (3, 16))], threads_before)
frozen = sum(not a.flags.writeable for a in inputs)
print("ok", errors, in1, in2, frozen, extra, reported, took1 < 15 and took2 < 15, names)
"""


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("loop", LOOPS)
def test_loops_stopped_and_closed_at_random_under_waiting_requests(loop, seed, tmp_path):
    """Loops in several threads share two sessions (with a trio run); their requests wait for a first compile, a
    session slot (max_in_flight=2), a dynamic-shape graph's cap, or in a Batcher, and each loop is stopped at a random
    point, then closed (its tasks dropped or kept), closed after one more iteration, or run again (at once or later:
    its requests must all complete), while the trio run's requests complete. A fresh loop's requests then complete
    in bounded time, aclose() returns, and nothing stays in flight, pinned read-only or running in a thread."""
    code = _STRESS.replace("LOOP_KIND", loop).replace("SEED", str(seed)).replace("ROUNDS", "3")
    out = run_isolated(code, tmp_path, timeout=120)
    assert "ok [] 0 0 0 0 [] True" in out, out


# --- errors raised through a Batcher name it ---------------------------------------------------------------------

@pytest.mark.anyio
@pytest.mark.timeout(60, method="thread")
@pytest.mark.parametrize("together", [1, 6], ids=["alone", "batched"])
async def test_an_error_through_a_batcher_names_batcher_run(together):
    """A run a Batcher asked for fails: its callers called Batcher.run, so the error names Batcher.run and the graph
    (it used to name Session.run_graph_async only, which the application never called)."""
    import anyio
    import numpy as np

    import geasync as ga
    from conftest import add_model

    with ga.Session() as s:
        s.add_graph(7, ga.Graph.from_onnx(add_model(("N", 16))))
        s.compile_graph(7)
        ga.twin.inject_fault(s, 7, "fail_run", nth=0)  # every run fails
        async with ga.Batcher(s, 7, max_batch_size=8, max_delay=0.01) as batcher:
            errors: list = []

            async def one() -> None:
                a = np.ones((1, 16), np.float32)
                try:
                    await batcher.run([a, a])
                except ga.GeError as exc:
                    errors.append(exc)

            async with anyio.create_task_group() as tg:
                for _ in range(together):
                    tg.start_soon(one)
        assert len(errors) == together
        for exc in errors:
            assert exc.context.startswith("Batcher.run(graph_id=7)"), exc.context
            assert " in Batcher.run(graph_id=7) through Session.run_graph_async(graph_id=7)" in str(exc), str(exc)
            assert exc.status == ga.errors.INTERNAL_ERROR
        # the session's own requests still name what they called
        ga.twin.inject_fault(s, 7, "fail_run", nth=0)
        with pytest.raises(ga.GeError) as info:
            await s.run_graph_async(7, [np.ones((1, 16), np.float32)] * 2)
        assert info.value.context == "Session.run_graph_async(graph_id=7)", info.value.context
