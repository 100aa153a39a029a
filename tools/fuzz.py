#!/usr/bin/env python3
"""Coverage-guided fuzzing of geasync's model intake with atheris (libFuzzer for Python).

Targets:
  decode   raw bytes -> Graph.from_onnx -> Session.add_graph (the ONNX decoder and model checks) -> compile_graph
  compile  structurally valid models: a node-test model picked and mutated by the input (inputs blanked or swapped,
           declared dims and attributes changed, op types exchanged, nodes dropped) -> add_graph -> compile_graph
           with inputs of the declared shapes -> run_graph

The seed corpus is built from the onnx package's node-test models (onnx.backend.test.case.node) into
``--corpus`` (default .fuzz/<target>/corpus) on first use. Findings (a crash, a Python exception other than a
clear GeError/ValueError/TypeError, a timeout, memory beyond -rss_limit_mb) are written by libFuzzer to
.fuzz/<target>/ as crash-*/timeout-*/oom-* files; rerun one with ``tools/fuzz.py --target T --reproduce FILE``.

Coverage: atheris instruments the Python code it imports after ``atheris.instrument_imports``; the native
extension is reached through Python, so its coverage guides only when it is built with
``-fsanitize=fuzzer-no-link`` (not done here). Running against the sanitizer build (GEASYNC_SANITIZE=1, with the
ASan runtime preloaded) turns silent memory errors into findings, but then libFuzzer takes its coverage symbols from
ASan's library and finds no coverage at all (atheris warns): the run is unguided. Both targets still explore, as
the input's bytes pick a seed model and how to change it; a run without the sanitizer is coverage-guided on the
Python side.

  python tools/fuzz.py --target decode --seconds 60
  python tools/fuzz.py --target compile --seconds 1800
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import sys
import warnings

ROOT = pathlib.Path(__file__).resolve().parent.parent

# A model may declare any shape: inputs for compile/run are made only when this small.
MAX_INPUT_ELEMENTS = 1 << 16
# What a fuzzed model may make geasync allocate before it refuses (geasync.max_memory_bytes).
MEMORY_LIMIT = str(256 << 20)


SEEDS = ROOT / ".fuzz" / "seeds"  # the node-test models, written once (collecting them takes a while)


def node_test_models() -> list[bytes]:
    if not SEEDS.is_dir():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        tmp = SEEDS.with_name(f"seeds.{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        for case in collect_testcases(None):
            data = case.model.SerializeToString()
            (tmp / hashlib.sha1(data).hexdigest()).write_bytes(data)
        try:
            tmp.rename(SEEDS)
        except OSError:  # another process wrote them first
            pass
    return [p.read_bytes() for p in sorted(SEEDS.iterdir())]


def build_corpus(directory: pathlib.Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    if any(directory.iterdir()):
        return
    for data in node_test_models():
        (directory / hashlib.sha1(data).hexdigest()).write_bytes(data)


class Harness:
    """One session for the whole run; each input gets a fresh graph id, removed afterwards."""

    def __init__(self) -> None:
        import geasync as ga

        self.ga = ga
        self.session = ga.Session({"geasync.max_memory_bytes": MEMORY_LIMIT})
        self.graph_id = 0
        self._seeds: list | None = None
        self._seed_bytes: list[bytes] | None = None

    def expected(self):
        return (self.ga.GeError, ValueError, TypeError)

    def try_model(self, model_bytes: bytes, inputs_of=None) -> None:
        ga, s = self.ga, self.session
        self.graph_id += 1
        gid = self.graph_id
        try:
            s.add_graph(gid, ga.Graph(model_bytes))
        except self.expected():  # refused with a clear error (GeError, ModelFormatError, UnsupportedOpsetError, ...)
            return
        try:
            inputs = inputs_of() if inputs_of is not None else None
            s.compile_graph(gid, inputs)
            if inputs is not None:
                s.run_graph(gid, inputs)
        except self.expected():
            pass
        finally:
            s.remove_graph(gid)

    # --- decode ---
    def decode(self, data: bytes) -> None:
        """Half the inputs are raw bytes; the other half say how to damage one of the seed models (bytes
        overwritten, inserted, deleted, the model cut short): the native decoder is not instrumented, so coverage
        alone would keep only a handful of seeds."""
        import atheris

        if not data or data[0] & 1 == 0:
            self.try_model(bytes(data[1:]))
            return
        fdp = atheris.FuzzedDataProvider(data[1:])
        seeds = self.seed_bytes()
        model = bytearray(seeds[fdp.ConsumeIntInRange(0, len(seeds) - 1)])
        for _ in range(fdp.ConsumeIntInRange(1, 8)):
            if not model:
                break
            at = fdp.ConsumeIntInRange(0, len(model) - 1)
            how = fdp.ConsumeIntInRange(0, 4)
            if how == 0:
                model[at] = fdp.ConsumeIntInRange(0, 255)
            elif how == 1:
                model[at:at] = fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 10))
            elif how == 2:
                del model[at:at + fdp.ConsumeIntInRange(1, 16)]
            elif how == 3:  # a large varint where a length or a dim was
                model[at:at + 1] = bytes([0xFF] * fdp.ConsumeIntInRange(1, 9)) + b"\x01"
            else:
                del model[at:]
        self.try_model(bytes(model))

    def seed_bytes(self) -> list[bytes]:
        if self._seed_bytes is None:
            self._seed_bytes = node_test_models()
        return self._seed_bytes

    # --- compile ---
    def seeds(self) -> list:
        if self._seeds is None:
            import onnx

            self._seeds = []
            for data in node_test_models():
                m = onnx.ModelProto()
                m.ParseFromString(data)
                try:
                    self.ga.Graph(data)._handle("fuzz seed")  # parsed by the twin: a useful starting point
                except self.ga.GeError:
                    continue
                self._seeds.append(m)
        return self._seeds

    def compile(self, data: bytes) -> None:
        import atheris
        import onnx

        fdp = atheris.FuzzedDataProvider(data)
        seeds = self.seeds()
        model = onnx.ModelProto()
        model.CopyFrom(seeds[fdp.ConsumeIntInRange(0, len(seeds) - 1)])
        for _ in range(fdp.ConsumeIntInRange(0, 6)):
            mutate(model, fdp)
        try:
            model_bytes = model.SerializeToString()
        except Exception:
            return
        self.try_model(model_bytes, lambda: make_inputs(model))


_ELEM_TYPES = [1, 2, 3, 5, 6, 7, 9, 10, 11, 12, 13]
_DIMS = [0, 1, 2, 3, 7, 64, -1, 2**31 - 1, 2**40, 2**62]
_INTS = [0, 1, -1, 2, -2, 3, 7, 2**31 - 1, -(2**31), 2**62, -(2**63)]
_OPS = ["Add", "Concat", "Max", "Min", "Gather", "Reshape", "Slice", "Expand", "ConstantOfShape", "Range", "Conv",
        "MaxPool", "Split", "Squeeze", "Unsqueeze", "Transpose", "MatMul", "Gemm", "ReduceSum", "Where", "Clip",
        "Softmax", "Cast", "BatchNormalization", "LayerNormalization", "Flatten", "Identity", "Shape"]


def mutate(model, fdp) -> None:
    g = model.graph
    choice = fdp.ConsumeIntInRange(0, 7)
    nodes = g.node
    if choice == 0 and nodes:  # blank an input
        n = nodes[fdp.ConsumeIntInRange(0, len(nodes) - 1)]
        if n.input:
            n.input[fdp.ConsumeIntInRange(0, len(n.input) - 1)] = ""
    elif choice == 1 and nodes:  # rewire an input to another value
        names = [i.name for i in g.input] + [o for n in nodes for o in n.output] + [t.name for t in g.initializer]
        n = nodes[fdp.ConsumeIntInRange(0, len(nodes) - 1)]
        if n.input and names:
            n.input[fdp.ConsumeIntInRange(0, len(n.input) - 1)] = names[fdp.ConsumeIntInRange(0, len(names) - 1)]
    elif choice == 2 and g.input:  # change a declared dim
        t = g.input[fdp.ConsumeIntInRange(0, len(g.input) - 1)].type.tensor_type
        if t.shape.dim:
            d = t.shape.dim[fdp.ConsumeIntInRange(0, len(t.shape.dim) - 1)]
            d.dim_value = _DIMS[fdp.ConsumeIntInRange(0, len(_DIMS) - 1)]
        else:
            t.shape.dim.add().dim_value = _DIMS[fdp.ConsumeIntInRange(0, len(_DIMS) - 1)]
    elif choice == 3 and g.input:  # change a declared element type
        t = g.input[fdp.ConsumeIntInRange(0, len(g.input) - 1)].type.tensor_type
        t.elem_type = _ELEM_TYPES[fdp.ConsumeIntInRange(0, len(_ELEM_TYPES) - 1)]
    elif choice == 4 and nodes:  # change an int attribute
        n = nodes[fdp.ConsumeIntInRange(0, len(nodes) - 1)]
        if n.attribute:
            a = n.attribute[fdp.ConsumeIntInRange(0, len(n.attribute) - 1)]
            if a.ints:
                a.ints[fdp.ConsumeIntInRange(0, len(a.ints) - 1)] = _INTS[fdp.ConsumeIntInRange(0, len(_INTS) - 1)]
            else:
                a.i = _INTS[fdp.ConsumeIntInRange(0, len(_INTS) - 1)]
    elif choice == 5 and nodes:  # another operator, same wiring
        nodes[fdp.ConsumeIntInRange(0, len(nodes) - 1)].op_type = _OPS[fdp.ConsumeIntInRange(0, len(_OPS) - 1)]
    elif choice == 6 and len(nodes) > 1:  # drop a node
        del nodes[fdp.ConsumeIntInRange(0, len(nodes) - 1)]
    elif choice == 7 and g.initializer:  # change an initializer's contents (raw bytes) or dims
        t = g.initializer[fdp.ConsumeIntInRange(0, len(g.initializer) - 1)]
        if fdp.ConsumeBool() and t.dims:
            t.dims[fdp.ConsumeIntInRange(0, len(t.dims) - 1)] = _DIMS[fdp.ConsumeIntInRange(0, len(_DIMS) - 1)]
        else:
            t.raw_data = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64))


def make_inputs(model):
    """Arrays of the graph inputs' declared shapes (None if a shape is unknown or too large)."""
    import numpy as np
    from onnx import helper

    initializers = {t.name for t in model.graph.initializer}
    inputs = []
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        t = vi.type.tensor_type
        try:
            dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        except Exception:
            return None
        if not t.HasField("shape") or any(not d.HasField("dim_value") or d.dim_value < 0 for d in t.shape.dim):
            return None
        shape = tuple(d.dim_value for d in t.shape.dim)
        if int(np.prod(shape, dtype=object)) > MAX_INPUT_ELEMENTS:
            return None
        inputs.append(np.ones(shape, dtype=dtype))
    return inputs


def fuzz_once(args, libfuzzer_args: list[str]) -> int:
    """One libFuzzer run in this process: it stops at its first finding (written to .fuzz/<target>/)."""
    import atheris

    with atheris.instrument_imports():
        import geasync  # noqa: F401  (instrumented: coverage of the Python layer)
    harness = Harness()
    target = harness.decode if args.target == "decode" else harness.compile
    if args.reproduce is not None:
        target(args.reproduce.read_bytes())
        print(f"{args.reproduce}: no finding")
        return 0
    harness.seeds() if args.target == "compile" else harness.seed_bytes()  # before the clock starts
    argv = [sys.argv[0], str(args.corpus), f"-max_total_time={args.seconds}", "-timeout=20",
            f"-rss_limit_mb={args.rss_limit_mb}", f"-artifact_prefix={args.work}{os.sep}", "-print_final_stats=1",
            *libfuzzer_args]
    atheris.Setup(argv, target)
    atheris.Fuzz()
    return 0


def supervise(args, libfuzzer_args: list[str]) -> int:
    """Runs libFuzzer in child processes until ``--seconds`` have passed, restarting after each finding (the
    corpus grows across restarts). Exit status 1 if anything was found."""
    import subprocess
    import time

    deadline = time.monotonic() + args.seconds
    before = set(args.work.glob("*-*"))
    runs = 0
    while (left := int(deadline - time.monotonic())) > 0:
        cmd = [sys.executable, __file__, "--target", args.target, "--child", "--seconds", str(left),
               "--corpus", str(args.corpus), "--rss-limit-mb", str(args.rss_limit_mb), *libfuzzer_args]
        runs += 1
        status = subprocess.run(cmd).returncode
        if status == 0:
            break
    findings = sorted(set(args.work.glob("*-*")) - before)
    print(f"fuzz {args.target}: {args.seconds} s, {runs} libFuzzer run(s), {len(findings)} finding(s)")
    for path in findings:
        print(f"  {path}  (reproduce: {sys.argv[0]} --target {args.target} --reproduce {path})")
    return 1 if findings else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", choices=["decode", "compile"], required=True)
    parser.add_argument("--seconds", type=int, default=60, help="total fuzzing time")
    parser.add_argument("--corpus", type=pathlib.Path, help="corpus directory (default .fuzz/<target>/corpus)")
    parser.add_argument("--reproduce", type=pathlib.Path, help="run one input and exit")
    parser.add_argument("--rss-limit-mb", type=int, default=4096)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args, libfuzzer_args = parser.parse_known_args()
    args.work = ROOT / ".fuzz" / args.target
    args.work.mkdir(parents=True, exist_ok=True)
    args.corpus = args.corpus or args.work / "corpus"
    if args.child or args.reproduce is not None:
        return fuzz_once(args, libfuzzer_args)
    build_corpus(args.corpus)
    return supervise(args, libfuzzer_args)


if __name__ == "__main__":
    sys.exit(main())
