"""A KV-cache decoder driven as a generation loop drives it: each step feeds the last step's present keys and values
back as the past ones, so the past length, and with it the input shapes, grows by one per call. The twin compiles a
plan per new shape, shares the weights and the kernels the new shape leaves unchanged with the graph's other plans,
and keeps plans for lengths it may meet again; results must match onnx.reference at every step, across more
lengths than the plans kept, in a second sequence that meets the same lengths again, and from async tasks."""

from __future__ import annotations

import anyio
import numpy as np
import pytest

import geasync as ga
from conftest import TensorProto, helper, make_model

F = TensorProto.FLOAT


def make_kv_decoder(seed: int = 0, layers: int = 2, d_model: int = 32, heads: int = 4):
    """One decoding step of a GPT-style decoder (pre-LayerNorm, fused QKV projection, SiLU MLP, opset 17):
    x [B, 1, d] (the new token's embedding) and past_key_i / past_value_i [B, H, P, d / H] per layer ->
    y [B, 1, d] and present_key_i / present_value_i [B, H, P + 1, d / H]."""
    rng = np.random.default_rng(seed)
    d, h = d_model, heads
    dh = d // h
    inits, nodes = [], []

    def weight(name, shape, scale=None):
        scale = 1 / np.sqrt(shape[0]) if scale is None else scale
        inits.append((name, (rng.standard_normal(shape) * scale).astype(np.float32)))
        return name

    def const(name, values, dtype=np.int64):
        inits.append((name, np.asarray(values, dtype)))
        return name

    def node(op, ins, outs, **attrs):
        nodes.append(helper.make_node(op, ins, outs, **attrs))
        return outs[0]

    heads_shape = const("heads_shape", [0, 0, h, dh])
    model_shape = const("model_shape", [0, 0, d])
    split = const("split", [d, d, d])
    scale = const("scale", 1 / np.sqrt(dh), np.float32)
    inputs = [("x", F, ["B", 1, d])]
    outputs = [("y", F, ["B", 1, d])]
    x = "x"
    for i in range(layers):
        p = f"l{i}_"
        inputs += [(f"past_key_{i}", F, ["B", h, "P", dh]), (f"past_value_{i}", F, ["B", h, "P", dh])]
        outputs += [(f"present_key_{i}", F, ["B", h, "P1", dh]), (f"present_value_{i}", F, ["B", h, "P1", dh])]
        ln = node("LayerNormalization", [x, weight(p + "g1", [d], 0.1), weight(p + "b1", [d], 0.1)], [p + "ln1"],
                  axis=-1)
        qkv = node("Add", [node("MatMul", [ln, weight(p + "wqkv", [d, 3 * d])], [p + "qkv0"]),
                           weight(p + "bqkv", [3 * d], 0.1)], [p + "qkv"])
        node("Split", [qkv, split], [p + "q0", p + "k0", p + "v0"], axis=-1)
        q, k, v = (node("Transpose", [node("Reshape", [p + n + "0", heads_shape], [p + n + "h"])], [p + n],
                        perm=[0, 2, 1, 3]) for n in ("q", "k", "v"))
        keys = node("Concat", [f"past_key_{i}", k], [f"present_key_{i}"], axis=2)
        values = node("Concat", [f"past_value_{i}", v], [f"present_value_{i}"], axis=2)
        scores = node("Mul", [node("MatMul", [q, node("Transpose", [keys], [p + "kt"], perm=[0, 1, 3, 2])],
                                   [p + "s0"]), scale], [p + "s"])
        attn = node("MatMul", [node("Softmax", [scores], [p + "probs"], axis=-1), values], [p + "attn"])
        merged = node("Reshape", [node("Transpose", [attn], [p + "attn_t"], perm=[0, 2, 1, 3]), model_shape],
                      [p + "merged"])
        proj = node("Add", [node("MatMul", [merged, weight(p + "wo", [d, d])], [p + "o0"]),
                            weight(p + "bo", [d], 0.1)], [p + "o"])
        x = node("Add", [x, proj], [p + "res1"])
        ln2 = node("LayerNormalization", [x, weight(p + "g2", [d], 0.1), weight(p + "b2", [d], 0.1)], [p + "ln2"],
                   axis=-1)
        hid = node("Add", [node("MatMul", [ln2, weight(p + "w1", [d, 4 * d])], [p + "h0"]),
                           weight(p + "b1m", [4 * d], 0.1)], [p + "h"])
        act = node("Mul", [hid, node("Sigmoid", [hid], [p + "sig"])], [p + "act"])
        mlp = node("Add", [node("MatMul", [act, weight(p + "w2", [4 * d, d])], [p + "m0"]),
                           weight(p + "b2m", [d], 0.1)], [p + "m"])
        x = node("Add", [x, mlp], [p + "res2"])
    node("LayerNormalization", [x, weight("gf", [d], 0.1), weight("bf", [d], 0.1)], ["y"], axis=-1)
    return make_model(nodes, inputs, outputs, initializers=inits, opset=17)


def start(model, batch: int, past: int, seed: int = 1):
    """The first step's inputs: a random token embedding and a random cache of `past` positions."""
    rng = np.random.default_rng(seed)
    feeds = []
    for value in model.graph.input:
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        dims[0] = batch
        if value.name != "x":
            dims[2] = past
        feeds.append(rng.standard_normal(dims).astype(np.float32))
    return feeds


def next_inputs(feeds, outs, seed: int):
    """The next step: a new token embedding, the presents as the pasts."""
    x = np.random.default_rng(seed).standard_normal(feeds[0].shape).astype(np.float32)
    return [x, *outs[1:]]


@pytest.fixture(scope="module")
def decoder():
    from onnx.reference import ReferenceEvaluator

    model = make_kv_decoder()
    return model, ReferenceEvaluator(model)


def reference_step(ref, model, feeds):
    names = [v.name for v in model.graph.input]
    return ref.run(None, dict(zip(names, feeds, strict=True)))


def test_a_decode_loop_matches_the_reference_at_every_length(decoder):
    model, ref = decoder
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        for sequence in range(2):  # the second meets the same lengths again (plans kept or rebuilt)
            feeds = start(model, batch=2, past=3, seed=10 + sequence)
            for step in range(24):  # lengths 3..26: more than the 16 plans always kept
                outs = [t.numpy() for t in s.run_graph(1, feeds)]
                want = reference_step(ref, model, feeds)
                for got, exp in zip(outs, want, strict=True):
                    np.testing.assert_allclose(got, exp, rtol=1e-4, atol=1e-5, err_msg=f"sequence {sequence}, {step}")
                assert outs[1].shape[2] == feeds[1].shape[2] + 1
                feeds = next_inputs(feeds, outs, seed=100 * sequence + step)


def test_lengths_met_out_of_order_and_batch_changes(decoder):
    """Plans built from one another in any order (a longer past, a shorter one, another batch) all compute right."""
    model, ref = decoder
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        for batch, past in [(1, 5), (1, 9), (3, 5), (1, 0), (2, 40), (1, 9), (3, 6), (1, 1)]:
            feeds = start(model, batch, past, seed=batch * 100 + past)
            outs = [t.numpy() for t in s.run_graph(1, feeds)]
            for got, exp in zip(outs, reference_step(ref, model, feeds), strict=True):
                np.testing.assert_allclose(got, exp, rtol=1e-4, atol=1e-5, err_msg=f"batch {batch} past {past}")


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_concurrent_decode_loops_on_one_graph(decoder, anyio_backend):
    """Several sequences decoded at once from async tasks, each at its own length: every step as the reference."""
    model, ref = decoder
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        failures = []

        async def sequence(i: int) -> None:
            feeds = start(model, batch=1, past=2 + 3 * i, seed=i)
            for step in range(10):
                outs = [t.numpy() for t in await s.run_graph_async(1, feeds)]
                want = reference_step(ref, model, feeds)
                if not all(np.allclose(g, e, rtol=1e-4, atol=1e-5) for g, e in zip(outs, want, strict=True)):
                    failures.append((i, step))
                feeds = next_inputs(feeds, outs, seed=1000 * i + step)

        async with anyio.create_task_group() as tg:
            for i in range(4):
                tg.start_soon(sequence, i)
        assert not failures, failures
