"""geasync's pytest plugin: test a service on the twin without writing the same fixtures in every suite.

Installed with geasync and on by default (a ``pytest11`` entry point); ``-p no:geasync`` turns it off. It adds:

``ga_session``
    A :class:`geasync.Session` on the twin, closed after the test; the test then fails if it left native objects
    alive (sessions, graphs, tensors, streams, pending completions: :func:`geasync.live_counters`).
``ga_leak_check``
    The same leak check for tests that make their own sessions.
``ga_faults``
    Fault injection cleared after the test: ``ga_faults.inject(session, graph_id, "fail_run", nth=2)`` (and
    ``ga_faults.fault(...)`` as a ``with`` block). A one-shot fault whose run never came fails the test.
``ga_mlp``
    A fresh :class:`geasync.Graph` of the sample MLP (:func:`geasync.samples.mlp`).
``@pytest.mark.geasync_loops``
    Runs an ``async def`` test once per event loop: asyncio, uvloop and trio, through anyio's pytest plugin
    (``@pytest.mark.geasync_loops("asyncio", "trio")`` for a subset). A loop whose package is not installed is
    skipped, saying which. Tests marked for pytest-asyncio (``@pytest.mark.asyncio``) are left to it.

    async def test_my_service(ga_session, ga_mlp):
        ...

The plugin imports geasync only when one of its fixtures is used.
"""

from __future__ import annotations

import gc
import importlib.util
import inspect
import time
from typing import TYPE_CHECKING, Any, ContextManager, Generator, Iterator

import pytest

if TYPE_CHECKING:  # imported when a fixture is used (see the module docstring)
    from .graph import Graph
    from .session import Session

# event loop -> anyio_backend value (anyio's plugin runs the test on it) and the package it needs
LOOPS: dict[str, tuple[tuple[str, dict[str, Any]], str]] = {
    "asyncio": (("asyncio", {}), "asyncio"),
    "uvloop": (("asyncio", {"use_uvloop": True}), "uvloop"),
    "trio": (("trio", {}), "trio"),
}
MARKER = "geasync_loops"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(*loops): run this async test on each of asyncio, uvloop and trio (or the loops named), "
        "through anyio's pytest plugin (geasync's pytest plugin)")


def _loop_params(marker: pytest.Mark) -> list[Any]:
    args: tuple[Any, ...] = marker.args
    if len(args) == 1 and isinstance(args[0], (list, tuple)):  # geasync_loops(["asyncio", "trio"])
        args = tuple(args[0])
    unknown = [name for name in args if not isinstance(name, str) or name not in LOOPS]
    if unknown:
        raise pytest.UsageError(f"@pytest.mark.{MARKER}: unknown event loop(s) {unknown}; "
                                f"choose from {', '.join(LOOPS)}")
    params = []
    for name in dict.fromkeys(args or LOOPS):  # a loop named twice runs once
        backend, package = LOOPS[name]
        marks: tuple[pytest.MarkDecorator, ...] = ()
        if importlib.util.find_spec(package) is None:
            marks = (pytest.mark.skip(reason=f"{name}: the {package!r} package is not installed"),)
        params.append(pytest.param(backend, id=name, marks=marks))
    return params


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: Any, name: str, obj: object) -> None:
    # anyio's plugin runs a coroutine test that takes its anyio_backend fixture. A marked test is given that
    # argument here, as a parametrize mark (which takes precedence over the fixture's own params), before pytest
    # computes the test's fixtures.
    if not (collector.istestfunction(obj, name) and inspect.iscoroutinefunction(obj)):
        return
    if getattr(obj, "_geasync_loops", False):
        return
    own = [m for m in getattr(obj, "pytestmark", ()) if m.name == MARKER]
    marker = own[0] if own else collector.get_closest_marker(MARKER)
    if marker is None:
        return
    if any(m.name == "asyncio" for m in getattr(obj, "pytestmark", ())) or collector.get_closest_marker("asyncio"):
        raise pytest.UsageError(f"{collector.nodeid}::{name}: @pytest.mark.{MARKER} and @pytest.mark.asyncio both "
                                "ask to run this test; keep one")
    pytest.mark.usefixtures("anyio_backend")(obj)
    pytest.mark.parametrize("anyio_backend", _loop_params(marker))(obj)
    obj._geasync_loops = True  # type: ignore[attr-defined]


# --- fixtures -------------------------------------------------------------------------------------------------

def _live() -> dict[str, int]:
    import geasync as ga

    for _ in range(4):  # reference cycles holding Tensors or Sessions go first
        gc.collect()
    return ga.live_counters()


# A completion queue belongs to an event loop (one hub per loop), which may outlive a test (a session-scoped loop).
_PER_LOOP = {"completion_queues"}


# How long a leak check waits for objects another thread is still releasing: a run whose callback was dropped
# keeps its session's graphs until its abandoned completion is settled after the session closed, which (its loop
# not running between tests) another thread does, a moment after the test's teardown.
_SETTLE_SECONDS = 1.0


def _assert_no_leaks(before: dict[str, int], what: str) -> None:
    deadline = time.monotonic() + _SETTLE_SECONDS
    while True:
        after = _live()
        leaked = {name: (before[name], after[name]) for name in before
                  if name not in _PER_LOOP and after.get(name, 0) > before[name]}  # fewer: a wider fixture ended
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    if leaked:
        pytest.fail(f"{what}: native objects still alive after the test (counter: before, after): {leaked}. "
                    "Close sessions and streams, and drop Tensors the test kept (module globals, caches).",
                    pytrace=False)


_CALL_FAILED = pytest.StashKey[bool]()
_LIVE_BEFORE = pytest.StashKey[dict[str, int]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[_CALL_FAILED] = report.failed
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: Any) -> Iterator[Any]:
    # The leak check runs once every fixture of the test is torn down (a user's fixture that owns a session
    # included, whatever its order), and after the values the fixtures gave the test are let go.
    result = yield
    before = item.stash.get(_LIVE_BEFORE, None)
    if before is not None:
        del item.stash[_LIVE_BEFORE]
        if not item.stash.get(_CALL_FAILED, False):  # a failed test's traceback keeps its objects alive
            funcargs = getattr(item, "funcargs", None)
            if funcargs:
                funcargs.clear()
            _assert_no_leaks(before, "ga_leak_check")
    return result


@pytest.fixture
def ga_leak_check(request: pytest.FixtureRequest) -> None:
    """Fails the test if it leaves geasync's native live counters (sessions, graphs, tensors, ...) changed.

    Checked after all of the test's fixtures are torn down; not after a test that failed (its traceback keeps its
    objects alive, and the failure is the news)."""
    import geasync as ga

    ga.current_backend()  # the runtime's own first-use objects are not the test's
    request.node.stash[_LIVE_BEFORE] = _live()


@pytest.fixture
def ga_session(ga_leak_check: None, request: pytest.FixtureRequest) -> Iterator[Session]:
    """A twin Session, closed after the test, which then fails if native objects were left alive."""
    import geasync as ga

    session = ga.Session(backend="twin")
    try:
        yield session
    finally:
        faults = request.node.funcargs.get("ga_faults")
        if isinstance(faults, Faults):  # check its faults while the session is still open, whatever the order
            faults.clear()
        session.close()


class Faults:
    """``ga_faults``: :func:`geasync.twin.inject_fault` with bookkeeping, cleared after the test."""

    def __init__(self) -> None:
        self._armed: dict[tuple[int, int], tuple[Session, int]] = {}
        self.never_fired: list[str] = []

    def inject(self, session: Session, graph_id: int, kind: str, **kwargs: Any) -> None:
        """:func:`geasync.twin.inject_fault`; ``nth`` counts from this call."""
        import geasync as ga

        ga.twin.inject_fault(session, graph_id, kind, **kwargs)
        self._armed[(id(session), graph_id)] = (session, graph_id)

    def fault(self, session: Session, graph_id: int, kind: str, **kwargs: Any) -> ContextManager[None]:
        """:func:`geasync.twin.fault`: armed for a ``with`` block, checked and cleared at its end."""
        import geasync as ga

        return ga.twin.fault(session, graph_id, kind, **kwargs)

    def release(self, session: Session, graph_id: int) -> None:
        """:func:`geasync.twin.release_stalled`."""
        import geasync as ga

        ga.twin.release_stalled(session, graph_id)

    def runs(self, session: Session, graph_id: int) -> int:
        """:func:`geasync.twin.fault_runs`."""
        import geasync as ga

        return ga.twin.fault_runs(session, graph_id)

    def clear(self) -> None:
        """Clears every fault armed through this object, noting in ``never_fired`` the ones that never fired."""
        import geasync as ga

        never_fired = self.never_fired
        for session, graph_id in self._armed.values():
            if session.closed:  # closing the session forgot its faults
                continue
            unfired = ga.twin.unfired_faults(session, graph_id)
            if unfired:
                never_fired.append(f"{unfired} on graph {graph_id} of session {session.session_id} (it ran "
                                   f"{ga.twin.fault_runs(session, graph_id)} time(s) since its first fault)")
            ga.twin.clear_faults(session, graph_id)
        self._armed.clear()


@pytest.fixture
def ga_faults() -> Iterator[Faults]:
    """Twin fault injection, cleared after the test; a one-shot fault (nth >= 1) that never fired fails it."""
    faults = Faults()
    yield faults
    faults.clear()
    if faults.never_fired:
        pytest.fail("ga_faults: fault(s) armed with nth >= 1 never fired: " + "; ".join(faults.never_fired)
                    + ". nth counts the graph's runs from each inject call; use nth=0 for every run.", pytrace=False)


@pytest.fixture
def ga_mlp() -> Graph:
    """A fresh Graph of geasync's sample MLP: input "x" float32 [N, 784], output "probs" float32 [N, 10]."""
    import geasync as ga

    return ga.samples.mlp()
