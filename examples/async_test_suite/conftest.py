"""Fixtures for the example service's tests: the model, and a running service per test (pytest-asyncio)."""

from __future__ import annotations

import pathlib

import pytest
import pytest_asyncio

from classifier_service import ClassifierService

MODEL = pathlib.Path(__file__).resolve().parent.parent / "models" / "mlp.onnx"


@pytest.fixture
def model_path() -> pathlib.Path:
    return MODEL


@pytest_asyncio.fixture
async def service(model_path):
    async with ClassifierService(model_path, max_in_flight=32) as svc:
        yield svc
