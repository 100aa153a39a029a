"""Deploy the example MLP on a local Ray Serve cluster with two twin replicas, call it through a handle and over
HTTP, then shut everything down. Needs `pip install "geasync[serve]"`.

    python examples/ray_serve/deploy_local.py
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import httpx
import numpy as np
import ray
from ray import serve
from ray.serve.handle import DeploymentHandle

from geasync.serve import GeasyncModel

MODEL = pathlib.Path(__file__).resolve().parent.parent / "models" / "mlp.onnx"


async def call(handle: DeploymentHandle[Any]) -> None:
    xs = [np.random.rand(1, 784).astype(np.float32) for _ in range(32)]
    answers = await asyncio.gather(*(handle.infer.remote([x]) for x in xs))  # numpy in, numpy out
    print("through the handle:", len(answers), "answers, first", answers[0][0].round(3))
    async with httpx.AsyncClient(base_url="http://127.0.0.1:8000") as client:
        r = await client.post("/mlp", json={"inputs": {"x": xs[0].tolist()}})
        print("over HTTP:", r.status_code, np.asarray(r.json()["outputs"]["probs"]).round(3))


def main() -> None:
    ray.init(num_cpus=2, include_dashboard=False)
    serve.start(http_options={"host": "127.0.0.1", "port": 8000})
    app = GeasyncModel.options(num_replicas=2, ray_actor_options={"num_cpus": 0.5}).bind(
        str(MODEL), max_batch_size=32, max_delay=0.002)
    handle = serve.run(app, name="mlp", route_prefix="/mlp")
    try:
        asyncio.run(call(handle))
        print("replica statistics:", handle.statistics.remote().result()["session"])
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call]  # (Ray does not annotate it)
        ray.shutdown()


if __name__ == "__main__":
    main()
