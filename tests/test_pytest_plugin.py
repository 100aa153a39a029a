"""geasync's pytest plugin, as a user's suite meets it: one pytest run in a subprocess over a small suite, then each
test's outcome read from its JUnit report. Also the fault counting the plugin relies on (nth from each call)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import geasync as ga

pytestmark = pytest.mark.timeout(240, method="thread")

USER_SUITE = '''
import gc
import anyio
import numpy as np
import pytest
import sniffio

import geasync as ga

X = np.zeros((2, 784), np.float32)
KEPT = []


def test_session_runs_the_sample(ga_session, ga_mlp):
    ga_session.add_graph(1, ga_mlp)
    (y,) = ga_session.run_graph(1, [X])
    assert y.numpy().shape == (2, 10)


def test_a_kept_tensor_is_reported_as_a_leak(ga_session, ga_mlp):
    ga_session.add_graph(1, ga_mlp)
    # an output of 2048 x 10 float32 (80 KiB) stays in runtime memory (up to 64 KiB are copied out at once)
    KEPT.extend(ga_session.run_graph(1, [np.zeros((2048, 784), np.float32)]))  # outlives the test


def test_drop_the_kept_tensor():
    KEPT.clear()
    gc.collect()


@pytest.fixture(scope="module")
def shared_session():
    with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp())
        yield s


def test_fault_armed_for_every_run(shared_session, ga_faults):
    ga_faults.inject(shared_session, 1, "fail_run", nth=0)
    with pytest.raises(ga.GeError, match="fault injected"):
        shared_session.run_graph(1, [X])


def test_faults_were_cleared_after_the_previous_test(shared_session):
    (y,) = shared_session.run_graph(1, [X])
    assert y.numpy().shape == (2, 10)


def test_a_second_fault_counts_from_its_own_call(ga_session, ga_mlp, ga_faults):
    ga_session.add_graph(1, ga_mlp)
    ga_faults.inject(ga_session, 1, "fail_run", nth=1)
    with pytest.raises(ga.GeError):
        ga_session.run_graph(1, [X])
    ga_session.run_graph(1, [X])
    ga_faults.inject(ga_session, 1, "fail_run", nth=1)  # runs so far: 2; this one hits the next
    with pytest.raises(ga.GeError):
        ga_session.run_graph(1, [X])


def test_a_fault_that_never_fires_fails_the_test(ga_faults, ga_session, ga_mlp):
    ga_session.add_graph(1, ga_mlp)
    ga_faults.inject(ga_session, 1, "fail_run", nth=5)
    ga_session.run_graph(1, [X])


@pytest.mark.geasync_loops
async def test_on_every_loop(ga_session, ga_mlp, anyio_backend):
    ga_session.add_graph(1, ga_mlp)
    (y,) = await ga_session.run_graph_async(1, [X])
    name, options = anyio_backend
    assert sniffio.current_async_library() == name
    if options.get("use_uvloop"):
        import asyncio, uvloop
        assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
    assert y.numpy().shape == (2, 10)


@pytest.mark.geasync_loops
async def test_a_lost_callback_times_out(ga_session, ga_mlp, ga_faults):
    ga_session.add_graph(1, ga_mlp)
    ga_faults.inject(ga_session, 1, "drop_callback")  # GE never calls back: the timeout is what the test exercises
    with pytest.raises(TimeoutError):
        await ga_session.run_graph_async(1, [X], timeout=0.05)


@pytest.fixture
async def batcher(ga_session, ga_mlp):
    ga_session.add_graph(1, ga_mlp)
    b = ga.Batcher(ga_session, 1, max_batch_size=8)
    yield b
    await b.aclose()


@pytest.mark.geasync_loops
async def test_a_lost_callback_times_out_through_a_batcher(batcher, ga_session, ga_faults):
    ga_faults.inject(ga_session, 1, "drop_callback", nth=1)
    with pytest.raises(TimeoutError):
        await batcher.run([X[:1]], timeout=0.05)


@pytest.mark.geasync_loops("trio")
async def test_on_trio_only(ga_session, ga_mlp):
    ga_session.add_graph(1, ga_mlp)
    await ga_session.run_graph_async(1, [X])
    assert sniffio.current_async_library() == "trio"


@pytest.fixture
async def async_service(ga_leak_check):
    async with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp())
        yield s


@pytest.mark.geasync_loops("asyncio", "uvloop")
async def test_async_fixture_on_the_marked_loops(async_service):
    await async_service.run_graph_async(1, [X])


@pytest.mark.asyncio
async def test_pytest_asyncio_still_works(ga_session, ga_mlp):
    ga_session.add_graph(1, ga_mlp)
    (y,) = await ga_session.run_graph_async(1, [X])
    assert y.numpy().shape == (2, 10)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_anyio_plugin_still_works(ga_session, ga_mlp, anyio_backend):
    ga_session.add_graph(1, ga_mlp)
    await ga_session.run_graph_async(1, [X])
'''

INI = """
[pytest]
asyncio_mode = strict
asyncio_default_fixture_loop_scope = function
filterwarnings = error
addopts = --strict-markers
"""


def _env() -> dict:
    env = dict(os.environ)
    for name in ("PYTHONWARNINGS", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        env.pop(name, None)
    return env


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict:
    suite = tmp_path_factory.mktemp("user_suite")
    (suite / "pytest.ini").write_text(INI)
    (suite / "test_user.py").write_text(textwrap.dedent(USER_SUITE))
    report = suite / "report.xml"
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={report}"],
                       cwd=suite, capture_output=True, text=True, timeout=200, env=_env())
    assert report.exists(), r.stdout[-3000:] + r.stderr[-3000:]
    out: dict = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        messages = " ".join((child.get("message") or "") + (child.text or "") for child in case)
        out[case.get("name")] = (kinds, messages)
    out["__output__"] = r.stdout + r.stderr
    return out


def _passed(outcomes: dict, name: str) -> None:
    assert name in outcomes, f"{name} did not run:\n{outcomes['__output__'][-3000:]}"
    kinds, messages = outcomes[name]
    assert kinds == [], f"{name}: {kinds} {messages[-2000:]}"


def test_the_session_fixture_gives_a_working_twin_session(outcomes):
    _passed(outcomes, "test_session_runs_the_sample")


def test_a_leak_fails_the_test_at_teardown_naming_the_counters(outcomes):
    kinds, messages = outcomes["test_a_kept_tensor_is_reported_as_a_leak"]
    assert kinds == ["error"], kinds
    assert "native objects still alive" in messages and "'tensors'" in messages


def test_faults_are_cleared_after_each_test(outcomes):
    _passed(outcomes, "test_fault_armed_for_every_run")
    _passed(outcomes, "test_faults_were_cleared_after_the_previous_test")


def test_a_later_fault_counts_runs_from_its_own_call(outcomes):
    _passed(outcomes, "test_a_second_fault_counts_from_its_own_call")


def test_a_fault_that_never_fired_is_an_error(outcomes):
    kinds, messages = outcomes["test_a_fault_that_never_fires_fails_the_test"]
    assert kinds == ["error"], kinds
    assert "never fired" in messages and "ran 1 time(s)" in messages


def test_the_loops_marker_runs_a_test_on_asyncio_uvloop_and_trio(outcomes):
    for loop in ("asyncio", "uvloop", "trio"):
        _passed(outcomes, f"test_on_every_loop[{loop}]")
    _passed(outcomes, "test_on_trio_only[trio]")
    assert not any(name.startswith("test_on_trio_only[asyncio") for name in outcomes)
    for loop in ("asyncio", "uvloop"):
        _passed(outcomes, f"test_async_fixture_on_the_marked_loops[{loop}]")


def test_a_request_whose_callback_was_lost_is_no_leak_once_the_session_is_closed(outcomes):
    # closing the session (after the test, outside the loop) completes the dropped request as abandoned: the leak
    # check must not count that completion, delivered to a loop that is not running, as a leak
    for loop in ("asyncio", "uvloop", "trio"):
        _passed(outcomes, f"test_a_lost_callback_times_out[{loop}]")
        # through a batcher fixture, the graph was let go by the runtime's thread just after the leak check looked:
        # the check waits a moment for what is being released
        _passed(outcomes, f"test_a_lost_callback_times_out_through_a_batcher[{loop}]")


def test_pytest_asyncio_and_anyio_plugins_keep_working_alongside(outcomes):
    _passed(outcomes, "test_pytest_asyncio_still_works")
    _passed(outcomes, "test_anyio_plugin_still_works[asyncio]")


# --- the fault counting itself (public API) -------------------------------------------------------------------

A = np.ones((2, 784), np.float32)


def _outcomes(session, runs: int) -> list:
    out = []
    for _ in range(runs):
        try:
            session.run_graph(1, [A])
            out.append("ok")
        except ga.GeError:
            out.append("fail")
    return out


def test_nth_counts_from_each_inject_fault_call():
    with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp())
        ga.twin.inject_fault(s, 1, "fail_run", nth=2)
        assert _outcomes(s, 3) == ["ok", "fail", "ok"]
        ga.twin.inject_fault(s, 1, "fail_run", nth=1)  # the 4th run of the graph, the next one from here
        assert _outcomes(s, 2) == ["fail", "ok"]
        assert ga.twin.fault_runs(s, 1) == 5 and ga.twin.unfired_faults(s, 1) == 0
        ga.twin.clear_faults(s, 1)
        assert ga.twin.fault_runs(s, 1) == 0


@pytest.mark.parametrize("kind", ["fail_prerun", "stall_compile"])
def test_kinds_that_take_no_nth_refuse_one(kind):
    """These hit the graph's jobs from the moment they are armed: nth=2 was ignored, and the next run hit."""
    with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp())
        with pytest.raises(ValueError, match=f"{kind} takes no nth"):
            ga.twin.inject_fault(s, 1, kind, nth=2)
        assert ga.twin.unfired_faults(s, 1) == 0
        assert _outcomes(s, 1) == ["ok"]  # nothing was armed


def test_a_fault_block_whose_run_never_came_raises():
    with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp())
        with pytest.raises(ga.twin.FaultNeverFiredError, match="never fired: the graph ran 1 time"):
            with ga.twin.fault(s, 1, "fail_run", nth=2):
                s.run_graph(1, [A])
        assert ga.twin.unfired_faults(s, 1) == 0  # cleared all the same
        assert _outcomes(s, 2) == ["ok", "ok"]
        with ga.twin.fault(s, 1, "fail_run", nth=0):  # every run: nothing to wait for
            pass


def test_a_fault_on_a_closed_session_is_refused():
    s = ga.Session()
    s.close()
    with pytest.raises(ga.SessionClosedError):
        ga.twin.inject_fault(s, 1, "fail_run")


# --- the marker's arguments ---------------------------------------------------------------------------------------

MARKER_SUITE = '''
import pytest


@pytest.mark.geasync_loops("trio", "trio", "asyncio")
async def test_named_twice():
    pass


@pytest.mark.geasync_loops(["asyncio", "trio"])
async def test_given_a_list():
    pass
'''


def test_the_marker_runs_a_loop_named_twice_once_and_takes_a_list_of_names(tmp_path):
    """Loops named twice run once each (they ran twice, as trio0 / trio1); a list of names is taken as the names
    (it failed the whole collection with "unhashable type: 'list'")."""
    (tmp_path / "pytest.ini").write_text(INI)
    (tmp_path / "test_marker.py").write_text(MARKER_SUITE)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--collect-only"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60, env=_env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    collected = sorted(line.strip() for line in r.stdout.splitlines() if "::" in line)
    assert collected == ["test_marker.py::test_given_a_list[asyncio]", "test_marker.py::test_given_a_list[trio]",
                         "test_marker.py::test_named_twice[asyncio]", "test_marker.py::test_named_twice[trio]"], \
        r.stdout
