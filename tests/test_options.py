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


@pytest.mark.parametrize("key", ["Geasync.twin.faults", "GEASYNC.twin.faults", " geasync.twin.faults"])
def test_a_geasync_option_in_another_case_or_with_spaces_is_refused(key):
    """Not "geasync."-prefixed, these went to GE, which ignores keys it does not know: the faults were silently not
    armed, as with the misspelling the check is for."""
    with pytest.raises(ValueError) as ei:
        ga.Session({key: "graph_id=1,kind=fail_run"})
    text = str(ei.value)
    assert repr(key) in text and "lowercase" in text and "did you mean 'geasync.twin.faults'" in text
    with pytest.raises(ValueError, match="lowercase"):
        with ga.Session() as s:
            s.add_graph(1, add_graph(), {"GeAsync.anything": "1"})


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
    """GE options are GE's to judge: an unknown one is accepted (GE ignores what it does not use); a bad device id
    is refused (see the device id tests below)."""
    with ga.Session({"ge.someOptionGeasyncDoesNotKnow": "1", "ge.graphRunMode": "1"}) as s:
        s.add_graph(1, add_graph(), {"ge.exec.precision_mode": "force_fp16", "ge.anyOther": "x"})
        (c,) = s.run_graph(1, [A, A])
        np.testing.assert_array_equal(c.numpy(), 2 * A)
    with pytest.raises(ga.GeError, match="ge.session_device_id") as ei:
        ga.Session({"ge.session_device_id": "4096"})
    assert not isinstance(ei.value, ValueError)


BAD_DEVICE_OPTIONS = [{"ge.exec.deviceId": "99"}, {"ge.exec.deviceId": "abc"}, {"ge.exec.deviceId": ""},
                      {"ge.exec.deviceId": "-2"}, {"ge.session_device_id": "99"}, {"ge.session_device_id": "1x"}]


@pytest.mark.parametrize("options", BAD_DEVICE_OPTIONS, ids=lambda o: "=".join(*o.items()) or "empty")
def test_a_bad_device_id_is_param_invalid_for_every_session(options):
    """GE is initialised by a process's first session only, and GeSession's constructor has no status of its own:
    the refusal is PARAM_INVALID however many sessions came first (this process has made many by now)."""
    ga.Session().close()
    for _ in range(2):
        with pytest.raises(ga.GeError, match=r"option ge\.[\w.]+='[^']*' is not a device id of this machine") as ei:
            ga.Session(options)
        assert ei.value.status == ga.errors.PARAM_INVALID, ei.value
    with ga.Session({"ge.exec.deviceId": "0", "ge.session_device_id": "-1"}):
        pass


def test_a_bad_device_id_of_the_first_session_is_param_invalid_too(tmp_path):
    """The first session passes ge.exec.deviceId to GEInitializeV2: a fresh process sees the same status, and GE
    stays usable (the refused device is not left as the process's default)."""
    import subprocess
    import sys

    script = (
        "import geasync as ga\n"
        "for options in OPTIONS:\n"
        "    try:\n"
        "        ga.Session(options)\n"
        "    except ga.GeError as exc:\n"
        "        print(exc.status, 'is not a device id of this machine' in str(exc))\n"
        "with ga.Session() as s:\n"
        "    s.add_graph(1, ga.samples.mlp())\n"
        "stream = ga.Stream()\n"
        "stream.close()\n"
        "print('ok')\n"
    ).replace("OPTIONS", repr(BAD_DEVICE_OPTIONS[:2]))
    # run outside the source tree: `python -c` puts the working directory first on sys.path
    done = subprocess.run([sys.executable, "-W", "error", "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n") == [f"{ga.errors.PARAM_INVALID} True"] * 2 + ["ok", ""], done.stdout


@pytest.mark.parametrize("value, problem", [
    ("garbage", "'garbage' is not key=value"),
    ("graph_id=1", "kind missing"),
    ("kind=fail_run", "graph_id missing"),
    ("graph_id=one,kind=fail_run", "graph_id='one' is not a number"),
    ("graph_id=1,kind=fail_run,delay=soon", "delay='soon' is not a number"),
    ("graph_id=1,kind=fail_run,when=later", "unknown key(s) 'when'"),
    ("graph_id=1,kind=explode", "kind must be one of fail_run"),
    ("graph_id=1,kind=fail_run;graph_id=2", "kind missing"),
    ("graph_id=1,kind=fail_prerun,nth=2", "fail_prerun takes no nth"),  # it hit the first run, silently
])
def test_a_bad_faults_option_says_what_the_format_is(value, problem):
    with pytest.raises(ValueError) as ei:
        ga.Session({"geasync.twin.faults": value})
    text = str(ei.value)
    assert problem in text, text
    assert "Expected entries separated by ';'" in text and "graph_id=<int>,kind=<kind>" in text, text


@pytest.mark.parametrize("options", [{1: "a"}, {"geasync.twin.faults": 3}])
def test_option_types_are_still_type_errors(options):
    with pytest.raises(TypeError, match="str"):
        ga.Session(options)
