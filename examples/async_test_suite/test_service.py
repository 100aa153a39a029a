"""Tests of ClassifierService on geasync's native CPU twin, with pytest-asyncio."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from classifier_service import ClassifierService


def images(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (28, 28), dtype=np.uint8) for _ in range(n)]


@pytest.mark.asyncio
async def test_classify_returns_a_label_and_a_probability(service):
    pred = await service.classify(images(1)[0])
    assert 0 <= pred.label < 10
    assert 0.1 <= pred.confidence <= 1.0  # the top class of a 10-way softmax


@pytest.mark.asyncio
async def test_concurrent_requests_get_their_own_answers(service):
    imgs = images(200, seed=1)
    one_by_one = [await service.classify(img) for img in imgs[:20]]
    together = await asyncio.gather(*(service.classify(img) for img in imgs))
    assert together[:20] == one_by_one
    assert await service.classify_many(imgs) == together
    stats = service.session.statistics()
    assert stats.in_flight == 0 and stats.pinned_bytes == 0 and stats.failed == 0


@pytest.mark.asyncio
async def test_bad_input_is_rejected_and_the_service_keeps_working(service):
    with pytest.raises(ValueError, match="28x28"):
        await service.classify(np.zeros((27, 28), np.uint8))
    assert 0 <= (await service.classify(images(1)[0])).label < 10


@pytest.mark.asyncio
async def test_a_cancelled_request_does_not_disturb_the_others(service):
    imgs = images(50, seed=2)
    expected = await service.classify_many(imgs)
    tasks = [asyncio.create_task(service.classify(img)) for img in imgs]
    tasks[7].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[7], asyncio.CancelledError) or done[7] == expected[7]
    assert [d for i, d in enumerate(done) if i != 7] == [e for i, e in enumerate(expected) if i != 7]


@pytest.mark.asyncio
async def test_shutdown_waits_for_requests_in_flight(model_path):
    svc = ClassifierService(model_path)
    await svc.start()
    tasks = [asyncio.create_task(svc.classify(img)) for img in images(64, seed=3)]
    await asyncio.sleep(0)  # let them submit
    await svc.aclose()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(not isinstance(r, BaseException) for r in results), results
    with pytest.raises(RuntimeError, match="not running"):
        await svc.classify(images(1)[0])
