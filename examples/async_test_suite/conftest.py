"""Fixtures for the example service's tests, built on geasync's pytest plugin (installed with geasync, on by default).

The plugin gives: ``ga_session`` (a twin Session, closed and leak-checked after the test), ``ga_leak_check``,
``ga_faults`` (fault injection cleared after the test), and ``@pytest.mark.geasync_loops`` (run an async test on
asyncio, uvloop and trio, through anyio's pytest plugin).
"""

from __future__ import annotations

import pathlib
from typing import AsyncIterator

import pytest

from classifier_service import ClassifierService

MODEL = pathlib.Path(__file__).resolve().parent.parent / "models" / "mlp.onnx"


@pytest.fixture
def model_path() -> pathlib.Path:
    return MODEL


@pytest.fixture
async def service(model_path: pathlib.Path, ga_leak_check: None) -> AsyncIterator[ClassifierService]:
    """A running service per test; ga_leak_check checks for leaks once every fixture has been torn down."""
    async with ClassifierService(model_path, max_in_flight=32) as svc:
        yield svc
