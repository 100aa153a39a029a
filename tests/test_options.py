"""Options: geasync's own keys ("geasync.*") are checked, a misspelt one is refused naming the valid ones; every other
key is a GE option and goes to GE unchanged (GE accepts, ignores or refuses it as it does)."""

from __future__ import annotations

import numpy as np
import pytest

import geasync as ga
from conftest import add_model

A = np.ones((1, 16), np.float32)
pytestmark = pytest.mark.timeout(60)


def add_graph():
    return ga.Graph.from_onnx(add_model())


def test_misspelt_session_option_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError) as ei:
        ga.Session({"geasync.twin.fault": "graph_id=1,kind=fail_run"})
    text = str(ei.value)
    assert "'geasync.twin.fault'" in text and "did you mean 'geasync.twin.faults'" in text
    assert "Session() options" in text


@pytest.mark.parametrize("key", ["geasync.bogus", "geasync.", "geasync.twin.faults.extra", "geasync.max_in_flight"])
def test_unknown_session_options_are_refused(key):
    with pytest.raises(ValueError, match="geasync.twin.faults") as ei:
        ga.Session({key: "1"})
    assert repr(key) in str(ei.value)


def test_known_session_option_still_works():
    with ga.Session({"geasync.twin.faults": "graph_id=1,kind=fail_run"}) as s:
        s.add_graph(1, add_graph())
        with pytest.raises(ga.GeError):
            s.run_graph(1, [A, A])
        (c,) = s.run_graph(1, [A, A])  # the fault fired once
        np.testing.assert_array_equal(c.numpy(), 2 * A)


@pytest.mark.parametrize("api", ["add_graph", "add_graph_clone"])
def test_unknown_add_graph_option_is_refused_and_nothing_is_added(session, api):
    with pytest.raises(ValueError, match=rf"'geasync.batch' in Session.{api}\(\) options.*none"):
        getattr(session, api)(1, add_graph(), {"geasync.batch": "8"})
    with pytest.raises(ga.GeError, match="not exist"):
        session.graph_inputs(1)
    getattr(session, api)(1, add_graph(), {})
    (c,) = session.run_graph(1, [A, A])
    np.testing.assert_array_equal(c.numpy(), 2 * A)


def test_unknown_load_graph_option_is_refused(session):
    session.add_graph(1, add_graph())
    with pytest.raises(ValueError, match="Session.load_graph"):
        session.load_graph(1, {"geasync.stream": "x"})
    session.load_graph(1, {"ge.exec.frozenInputIndexes": ""})


def test_ge_options_go_to_ge_unchanged():
    """GE options are GE's to judge: an unknown one is accepted (GE ignores what it does not use), a bad device id
    is refused by GE itself, with its message."""
    with ga.Session({"ge.someOptionGeasyncDoesNotKnow": "1", "ge.graphRunMode": "1"}) as s:
        s.add_graph(1, add_graph(), {"ge.exec.precision_mode": "force_fp16", "ge.anyOther": "x"})
        (c,) = s.run_graph(1, [A, A])
        np.testing.assert_array_equal(c.numpy(), 2 * A)
    with pytest.raises(ga.GeError, match="ge.session_device_id") as ei:
        ga.Session({"ge.session_device_id": "4096"})
    assert not isinstance(ei.value, ValueError)


@pytest.mark.parametrize("options", [{1: "a"}, {"geasync.twin.faults": 3}])
def test_option_types_are_still_type_errors(options):
    with pytest.raises(TypeError, match="str"):
        ga.Session(options)
