"""Tests of ClassifierService on geasync's native CPU twin, on asyncio, uvloop and trio (geasync's pytest plugin)."""

from __future__ import annotations

import pathlib

import anyio
import numpy as np
import pytest

import geasync as ga
from classifier_service import GRAPH_ID, ClassifierService
from geasync.pytest_plugin import Faults

pytestmark = pytest.mark.geasync_loops  # each test runs once per event loop


def images(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (28, 28), dtype=np.uint8) for _ in range(n)]


async def test_classify_returns_a_label_and_a_probability(service: ClassifierService) -> None:
    pred = await service.classify(images(1)[0])
    assert 0 <= pred.label < 10
    assert 0.1 <= pred.confidence <= 1.0  # the top class of a 10-way softmax


async def test_concurrent_requests_get_their_own_answers(service: ClassifierService) -> None:
    imgs = images(200, seed=1)
    one_by_one = [await service.classify(img) for img in imgs[:20]]
    together = await service.classify_many(imgs)
    assert together[:20] == one_by_one
    stats = service.session.statistics()
    assert stats.in_flight == 0 and stats.pinned_bytes == 0 and stats.failed == 0


async def test_bad_input_is_rejected_and_the_service_keeps_working(service: ClassifierService) -> None:
    with pytest.raises(ValueError, match="28x28"):
        await service.classify(np.zeros((27, 28), np.uint8))
    assert 0 <= (await service.classify(images(1)[0])).label < 10


async def test_a_cancelled_request_does_not_disturb_the_others(service: ClassifierService) -> None:
    imgs = images(50, seed=2)
    expected = await service.classify_many(imgs)
    got: dict[int, object] = {}

    async def one(i: int) -> None:
        got[i] = await service.classify(imgs[i])

    async with anyio.create_task_group() as tg:
        for i in range(len(imgs)):
            tg.start_soon(one, i)
        with anyio.CancelScope() as scope:  # a request abandoned by its caller: it raises, or had already finished
            scope.cancel()
            got[-1] = await service.classify(imgs[7])
    assert got.get(-1, expected[7]) == expected[7]
    assert [got[i] for i in range(len(imgs))] == expected


async def test_a_failed_run_reaches_its_caller_only(service: ClassifierService, ga_faults: Faults) -> None:
    # The twin fails the next run of the service's graph as GE would; nth counts from this call.
    ga_faults.inject(service.session, GRAPH_ID, "fail_run", nth=1, status=ga.twin.INTERNAL_ERROR)
    with pytest.raises(ga.GeError) as failed:
        await service.classify(images(1)[0])
    assert failed.value.status == ga.twin.INTERNAL_ERROR
    assert 0 <= (await service.classify(images(1)[0])).label < 10  # the next request is served


async def test_a_lost_callback_ends_in_the_callers_timeout(service: ClassifierService, ga_faults: Faults) -> None:
    ga_faults.inject(service.session, GRAPH_ID, "drop_callback", nth=1)  # GE never calls back for that run
    with pytest.raises(TimeoutError):
        await service.classify(images(1)[0], timeout=0.2)


def submitted(stats: ga.SessionStatistics) -> int:
    return stats.in_flight + stats.waiting + stats.completed + stats.failed + stats.cancelled


async def test_shutdown_waits_for_requests_in_flight(model_path: pathlib.Path, ga_leak_check: None) -> None:
    svc = ClassifierService(model_path)
    await svc.start()
    results: list[object] = []

    async def one(img: np.ndarray) -> None:
        results.append(await svc.classify(img))

    async with anyio.create_task_group() as tg:
        for img in images(64, seed=3):
            tg.start_soon(one, img)
        with anyio.fail_after(10):  # let every request reach the session
            while submitted(svc.session.statistics()) < 64:
                await anyio.sleep(0)
        await svc.aclose()
    assert len(results) == 64
    with pytest.raises(RuntimeError, match="not running"):
        await svc.classify(images(1)[0])
