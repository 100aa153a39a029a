"""A tiny async service a user might build on geasync: classify 28x28 grayscale images with an ONNX MLP.

It is written against anyio, so it runs under asyncio, uvloop or trio; the tests next to it drive it on all three
with geasync's pytest plugin, on geasync's native CPU twin, with no NPU needed.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Sequence

import anyio
import numpy as np

import geasync as ga

GRAPH_ID = 1


@dataclass(frozen=True)
class Prediction:
    label: int
    confidence: float


class ClassifierService:
    """Owns one geasync Session; ``classify`` may be awaited from any number of tasks at once."""

    def __init__(self, model_path: str | pathlib.Path, *, max_in_flight: int = 128) -> None:
        self._model_path = pathlib.Path(model_path)
        self._max_in_flight = max_in_flight
        self._session: ga.Session | None = None

    async def start(self) -> None:
        session = ga.Session(max_in_flight=self._max_in_flight)
        try:
            session.add_graph(GRAPH_ID, ga.Graph.from_onnx(self._model_path))
            # The first RunGraphAsync compiles the graph for the shapes it sees: warm up with one image.
            await session.run_graph_async(GRAPH_ID, [np.zeros((1, 784), np.float32)])
        except BaseException:
            session.close()
            raise
        self._session = session

    async def aclose(self) -> None:
        """Stop: requests already in flight finish first, later ones raise."""
        session, self._session = self._session, None
        if session is not None:
            await session.aclose()

    async def __aenter__(self) -> "ClassifierService":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def session(self) -> ga.Session:
        if self._session is None:
            raise RuntimeError("the service is not running")
        return self._session

    @staticmethod
    def preprocess(image: np.ndarray) -> np.ndarray:
        image = np.asarray(image)
        if image.shape != (28, 28):
            raise ValueError(f"expected a 28x28 image, got shape {image.shape}")
        x = image.astype(np.float32) / 255.0
        return ((x - 0.1307) / 0.3081).reshape(1, 784)

    async def classify(self, image: np.ndarray, *, timeout: float | None = None) -> Prediction:
        x = self.preprocess(image)
        (probs,) = await self.session.run_graph_async(GRAPH_ID, [x], timeout=timeout)
        p = probs.numpy()[0]
        label = int(p.argmax())
        return Prediction(label, float(p[label]))

    async def classify_many(self, images: Sequence[np.ndarray]) -> list[Prediction]:
        results: list[Prediction | None] = [None] * len(images)

        async def one(i: int) -> None:
            results[i] = await self.classify(images[i])

        async with anyio.create_task_group() as tg:
            for i in range(len(images)):
                tg.start_soon(one, i)
        return results  # type: ignore[return-value]
