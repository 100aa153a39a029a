"""Command line: ``python -m geasync info | demo | check | run | bench`` (also installed as ``geasync``).

    info    version, backends (and which one "auto" picks), what the CANN backend was built against, and the CANN
            toolkit the environment names; loads the backends to check that they load, initialises no runtime
    demo    runs the sample MLP once, then 500 concurrent async requests checked against that run
    check   checks this install end to end (see ``python -m geasync check --help``)
    run     runs an ONNX model on inputs from .npy files and prints or saves its outputs
    bench   measures a model's synchronous and async throughput and latency, with a progress bar

Exit codes, for scripts: 0 success; 1 the work failed (a GE error, a wrong result, a failed check); 2 a bad command
line or unreadable input (a missing file, an input the model does not have).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import math
import os
import pathlib
import platform
import sys
import time
from typing import Any, Callable, Sequence, TextIO

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

_CANN_HINT = ("to build it: install the CANN toolkit, `source <toolkit>/set_env.sh` (or set GEASYNC_CANN_HOME), "
              "then reinstall geasync (see the Ascend setup page of the documentation)")


class UsageError(Exception):
    """A bad command line or input file: exit code 2, the message on stderr."""


# --- info -----------------------------------------------------------------------------------------------------

def _module_report(name: str, emit: Callable[[str], None]) -> None:
    from . import _preload

    try:
        _preload.preload()
        module = importlib.import_module(f"geasync._{name}")
    except Exception as exc:  # a backend that does not load is exactly what this command is for
        emit(f"  {name}: built, but does not load: {type(exc).__name__}: {exc}")
        return
    emit(f"  {name}: {module.__file__}")
    built = getattr(module.lib, "geasync_cann_build_info", None)
    if built is not None:
        lines = module.ffi.string(built()).decode("utf-8", "replace").splitlines()
        for line in lines:
            key, _, value = line.partition("=")
            emit(f"    built against: {value}" if key == "home" else f"    {line}")


def info(out: TextIO | None = None) -> int:
    stream = sys.stdout if out is None else out

    def emit(text: str) -> None:
        print(text, file=stream)

    import geasync
    from . import _toolkit
    from ._lib import backends

    emit(f"geasync {geasync.__version__} ({pathlib.Path(geasync.__file__).parent})")
    try:
        import numpy

        numpy_version = numpy.__version__
    except ImportError:  # pragma: no cover - numpy is a dependency
        numpy_version = "missing"
    emit(f"python {platform.python_version()} ({sys.executable}), numpy {numpy_version}")

    available = backends()
    requested = os.environ.get("GEASYNC_BACKEND") or ""
    auto = "cann" if "cann" in available else "twin"
    emit(f"backends: {', '.join(available) or 'none'} (auto selects {auto}; "
         f"GEASYNC_BACKEND={requested if requested else '<unset>'})")
    for name in ("twin", "cann"):
        if name in available:
            _module_report(name, emit)
        else:
            emit(f"  {name}: not built" + (f"; {_CANN_HINT}" if name == "cann" else ""))

    named = _toolkit.toolkit_home()
    if named is None:
        disabled = os.environ.get("GEASYNC_CANN_HOME", "").strip()
        emit("CANN toolkit: " + ("disabled (GEASYNC_CANN_HOME=" + disabled + ")" if disabled else
                                 "none named (GEASYNC_CANN_HOME, ASCEND_HOME_PATH and ASCEND_TOOLKIT_HOME are unset)"))
        return EXIT_OK
    try:
        tk = _toolkit.probe(named[0], named[1])
    except _toolkit.ToolkitError as exc:
        emit(f"CANN toolkit: {named[0]} (from ${named[1]}): unusable: {exc}")
        return EXIT_OK
    emit(f"CANN toolkit: {tk.home} (from ${tk.variable})")
    for rel, summary in tk.versions or [("version", "no version file found")]:
        emit(f"  {rel}: {summary}")
    emit("  include dirs: " + ", ".join(str(d) for d in tk.include_dirs))
    for name, path in tk.libraries.items():
        emit(f"  lib{name}.so: {path}")
    return EXIT_OK


# --- demo -----------------------------------------------------------------------------------------------------

def demo(args: argparse.Namespace) -> int:
    import anyio
    import numpy as np

    import geasync as ga

    rng = np.random.default_rng(0)
    x = rng.random((4, 784), dtype=np.float32)
    with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp())
        (y,) = s.run_graph(1, [x])
        probs = y.numpy().copy()
    print(f"geasync {ga.__version__} on the {ga.current_backend()!r} backend: the sample MLP (geasync.samples.mlp) "
          f"on a batch of {x.shape[0]} gives probs {probs.dtype}{list(probs.shape)}")
    for i, row in enumerate(probs):
        print(f"  sample {i}: class {int(row.argmax())} (p={row.max():.4f})")

    batches = [x] + [rng.random((4, 784), dtype=np.float32) for _ in range(args.requests - 1)]
    results: list[Any] = [None] * len(batches)

    async def burst() -> float:
        async with ga.Session() as s:
            s.add_graph(1, ga.samples.mlp())

            async def one(i: int) -> None:
                (out,) = await s.run_graph_async(1, [batches[i]])
                results[i] = out.numpy().copy()

            t0 = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for i in range(len(batches)):
                    tg.start_soon(one, i)
            return time.perf_counter() - t0

    elapsed = anyio.run(burst, backend=args.loop_backend, backend_options=args.loop_options)
    print(f"async: {len(batches)} concurrent requests on {args.loop} in {elapsed:.3f} s "
          f"({len(batches) / elapsed:,.0f} requests/s)")
    if not np.allclose(results[0], probs, rtol=1e-6, atol=1e-7):
        print("error: the async result differs from the synchronous run", file=sys.stderr)
        return EXIT_FAILED
    print("the async result matches the synchronous run")
    return EXIT_OK


# --- check ----------------------------------------------------------------------------------------------------

def check(argv: Sequence[str]) -> int:
    from . import _check

    return int(_check.main(list(argv)))


# --- run ------------------------------------------------------------------------------------------------------

def _read_model(path: str) -> tuple[bytes, Any]:
    """The model's bytes and its Graph (whose ``inputs`` / ``outputs`` are read from the bytes alone)."""
    import geasync as ga

    try:
        data = pathlib.Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read the model {path!r}: {exc.strerror or exc}") from None
    graph = ga.Graph.from_onnx(data)
    try:
        _ = graph.inputs  # reads the declared inputs now: a file that is no ONNX model is a usage error
    except ga.ModelFormatError as exc:
        raise UsageError(f"{path}: {exc}") from None
    return data, graph


def _describe(value: Any) -> str:
    """``name: float32[N, 784]`` (``?`` for an unnamed dim, ``[...]`` for any rank)."""
    dims = "..." if value.shape is None else ", ".join("?" if d is None else str(d) for d in value.shape)
    return f"{value.name}: {value.dtype if value.dtype is not None else 'unknown type'}[{dims}]"


def _load_inputs(specs: Sequence[str], info: Any, model: str) -> list[Any]:
    import numpy as np

    declared = [i.name for i in info.inputs]
    given: dict[str, Any] = {}
    for spec in specs:
        name, sep, file = spec.rpartition("=")
        if not sep:
            if len(declared) != 1:
                raise UsageError(f"--input {spec!r}: {model} has {len(declared)} inputs ({', '.join(declared)}); "
                                 "name each one: --input NAME=FILE.npy")
            name, file = declared[0], spec
        if name not in declared:
            raise UsageError(f"--input {spec!r}: {model} has no input {name!r}; its inputs: "
                             + ", ".join(_describe(i) for i in info.inputs))
        if name in given:  # the later one used to win silently
            raise UsageError(f"--input {spec!r}: input {name!r} is given twice; give each input once")
        try:
            loaded = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as exc:
            reason = str(exc)
            if "pickled" in reason and not _starts_with(file, b"\x93NUMPY"):
                # numpy takes any file that is neither .npy nor .npz for a pickle, and says it holds pickled data
                reason = "it is not a .npy file (write one with np.save(FILE.npy, array))"
            raise UsageError(f"--input {spec!r}: cannot load {file!r} as a .npy array: {reason}") from None
        if not isinstance(loaded, np.ndarray):  # np.load opens a .npz archive (several arrays) as an NpzFile
            names = ", ".join(getattr(loaded, "files", []))
            close = getattr(loaded, "close", None)
            if close is not None:
                close()
            raise UsageError(f"--input {spec!r}: {file!r} is a .npz archive (arrays: {names or 'none'}), not one "
                             "array; save each input with np.save(FILE.npy, array)")
        given[name] = loaded
    missing = [_describe(i) for i in info.inputs if i.name not in given]
    if missing:
        raise UsageError(f"{model} needs these inputs too: {', '.join(missing)} (--input NAME=FILE.npy)")
    return [given[name] for name in declared]


def _starts_with(path: str, magic: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(magic)) == magic
    except OSError:
        return False


def _save_path(path: str) -> str:
    """Where np.savez writes ``--save path`` (it adds ".npz" to a name without it), checked to be writable there."""
    target = path if path.endswith(".npz") else path + ".npz"
    parent = os.path.dirname(os.path.abspath(target))
    if os.path.isdir(target):
        raise UsageError(f"--save {path!r}: {target} is a directory; name an .npz file (e.g. {target}/out.npz)")
    if not os.path.isdir(parent):
        raise UsageError(f"--save {path!r}: the directory {parent} does not exist")
    return target


def run(args: argparse.Namespace) -> int:
    import numpy as np

    import geasync as ga

    data, info = _read_model(args.model)
    inputs = _load_inputs(args.input, info, args.model)
    save = _save_path(args.save) if args.save else None  # before the run: a path that cannot be written wastes it
    try:
        with ga.Session() as s:
            s.add_graph(1, ga.Graph.from_onnx(data))
            outputs = [t.numpy().copy() for t in s.run_graph(1, inputs)]
    except ga.GeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    names = [o.name for o in info.outputs] or [f"output_{i}" for i in range(len(outputs))]
    if save:
        try:
            np.savez(save, **dict(zip(names, outputs, strict=True)))
        except OSError as exc:
            print(f"error: cannot save the outputs to {save}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_FAILED
        print(f"saved {len(outputs)} output(s) to {save}: {', '.join(names)}")
        return EXIT_OK
    with np.printoptions(precision=args.precision, suppress=True, threshold=args.threshold):
        for name, value in zip(names, outputs, strict=True):
            print(f"{name}: {value.dtype}{list(value.shape)}")
            print(value)
    return EXIT_OK


# --- bench ----------------------------------------------------------------------------------------------------

class Progress:
    """A one-line progress bar on stderr (a line per phase when stderr is not a terminal)."""

    def __init__(self, label: str, total: float, stream: TextIO | None = None) -> None:
        self.label, self.total = label, total
        self.stream = sys.stderr if stream is None else stream
        self.tty = self.stream.isatty()
        self._shown = -1

    def update(self, done: float, note: str = "") -> None:
        filled = int(30 * min(done / self.total, 1.0)) if self.total else 30
        if not self.tty or filled == self._shown:
            return
        self._shown = filled
        self.stream.write(f"\r{self.label:<14} [{'#' * filled}{'.' * (30 - filled)}] {note}")
        self.stream.flush()

    def finish(self, note: str) -> None:
        prefix = f"\r{self.label:<14} [{'#' * 30}] " if self.tty else f"{self.label:<14} "
        self.stream.write(f"{prefix}{note}\n")
        self.stream.flush()


def _bench_inputs(info: Any, batch: int, model: str) -> list[Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    arrays = []
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 0
    for value in info.inputs:
        if value.shape is None or value.dtype is None:
            raise UsageError(f"{model}: input {_describe(value)} declares no shape or a type numpy lacks, so "
                             "bench cannot make it up; use `run` with --input files")
        shape = tuple(batch if not isinstance(d, int) else d for d in value.shape)
        dtype = value.dtype
        # made as float64 first: a --batch the machine cannot hold is a usage error, not a MemoryError traceback
        need = math.prod(shape) * 8
        if memory and need > memory:
            raise UsageError(f"{model}: input {value.name!r} of shape {list(shape)} at --batch {batch} needs "
                             f"{need / 2**30:.3g} GiB, more than this machine's {memory / 2**30:.3g} GiB; "
                             "use a smaller --batch")
        if dtype.kind == "f":
            arrays.append(rng.random(shape).astype(dtype))
        elif dtype.kind == "b":
            arrays.append(rng.random(shape) < 0.5)
        else:
            arrays.append(rng.integers(0, 4, shape).astype(dtype))  # small: valid as indices and sizes alike
    return arrays


def _percentiles(latencies: list[float]) -> tuple[float, float]:
    import numpy as np

    if not latencies:
        return float("nan"), float("nan")
    us = np.asarray(latencies) * 1e6
    return float(np.percentile(us, 50)), float(np.percentile(us, 99))


def _bench_sync(s: Any, inputs: list[Any], seconds: float) -> tuple[int, float, list[float]]:
    progress = Progress("sync run_graph", seconds)
    latencies: list[float] = []
    t0 = now = time.perf_counter()
    while now - t0 < seconds:
        start = time.perf_counter()
        s.run_graph(1, inputs)
        now = time.perf_counter()
        latencies.append(now - start)
        progress.update(now - t0, f"{len(latencies):,} runs")
    elapsed = now - t0
    progress.finish(f"{len(latencies):,} runs in {elapsed:.2f} s")
    return len(latencies), elapsed, latencies


def _bench_async(s: Any, inputs: list[Any], args: argparse.Namespace) -> tuple[int, float, list[float]]:
    import anyio

    progress = Progress("async", args.seconds)
    latencies: list[float] = []

    async def worker(t0: float, deadline: float) -> None:
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            await s.run_graph_async(2, inputs)
            now = time.perf_counter()
            latencies.append(now - start)
            progress.update(now - t0, f"{len(latencies):,} completions")

    async def measure() -> float:
        await s.run_graph_async(2, inputs)  # compile for RunGraphAsync outside the measurement
        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(args.in_flight):
                tg.start_soon(worker, t0, t0 + args.seconds)
        return time.perf_counter() - t0

    elapsed = anyio.run(measure, backend=args.loop_backend, backend_options=args.loop_options)
    progress.finish(f"{len(latencies):,} completions in {elapsed:.2f} s")
    return len(latencies), elapsed, latencies


def bench(args: argparse.Namespace) -> int:
    import json

    import geasync as ga

    data, info = _read_model(args.model)
    inputs = _bench_inputs(info, args.batch, args.model)
    shapes = ", ".join(f"{i.name}{list(a.shape)}" for i, a in zip(info.inputs, inputs, strict=True))
    print(f"{args.model}: inputs {shapes}; {args.seconds:g} s per measurement, {args.in_flight} in flight on "
          f"{args.loop}, backend {ga.current_backend()!r}", file=sys.stderr)
    try:
        with ga.Session(max_in_flight=args.in_flight) as s:
            s.add_graph(1, ga.Graph.from_onnx(data))
            s.add_graph(2, ga.Graph.from_onnx(data))  # one graph per run mode: GE's modes are exclusive per graph
            s.run_graph(1, inputs)  # compile and warm up outside the measurement
            sync_runs, sync_elapsed, sync_lat = _bench_sync(s, inputs, args.seconds)
            async_runs, async_elapsed, async_lat = _bench_async(s, inputs, args)
    except ga.GeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    sync_p50, sync_p99 = _percentiles(sync_lat)
    async_p50, async_p99 = _percentiles(async_lat)
    result = {
        "model": args.model, "batch": args.batch, "in_flight": args.in_flight, "loop": args.loop,
        "sync_runs_per_s": sync_runs / sync_elapsed, "sync_p50_us": sync_p50, "sync_p99_us": sync_p99,
        "async_runs_per_s": async_runs / async_elapsed, "async_p50_us": async_p50, "async_p99_us": async_p99,
    }
    if args.json:
        print(json.dumps(result))
        return EXIT_OK
    print(f"{'mode':<22}{'runs/s':>12}{'p50 (us)':>12}{'p99 (us)':>12}")
    print(f"{'sync run_graph':<22}{result['sync_runs_per_s']:>12,.0f}{sync_p50:>12,.1f}{sync_p99:>12,.1f}")
    print(f"{'async, ' + str(args.in_flight) + ' in flight':<22}{result['async_runs_per_s']:>12,.0f}"
          f"{async_p50:>12,.1f}{async_p99:>12,.1f}")
    print(f"async / sync throughput: {result['async_runs_per_s'] / result['sync_runs_per_s']:.2f}x")
    return EXIT_OK


# --- command line ---------------------------------------------------------------------------------------------

_LOOPS = {"asyncio": ("asyncio", {}), "uvloop": ("asyncio", {"use_uvloop": True}), "trio": ("trio", {})}


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not 0 < value < math.inf:  # inf: a measurement that never ends
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {value}")
    return value


def _add_loop_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--loop", choices=list(_LOOPS), default="asyncio", help="event loop (default: asyncio)")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m geasync", description="geasync command line. Exit codes: 0 success, 1 the work failed, "
        "2 a bad command line or input file.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("info", help="version, backends, CANN toolkit path and versions",
                   description="Prints the geasync version, its backends and the CANN toolkit the environment names.")
    p = sub.add_parser("demo", help="run the sample MLP, then concurrent async requests checked against it",
                       description="Runs geasync.samples.mlp() once, then --requests concurrent async requests; "
                       "exit 1 if the async result differs from the synchronous one.")
    p.add_argument("--requests", type=_positive_int, default=500, help="concurrent async requests (default: 500)")
    _add_loop_option(p)
    p = sub.add_parser("check", help="check this install end to end", add_help=False,
                       description="Checks this install (arguments are passed to the check).")
    p.add_argument("check_args", nargs=argparse.REMAINDER)
    p = sub.add_parser("run", help="run an ONNX model on .npy inputs; print or save the outputs",
                       description="Runs MODEL once (RunGraph) on the given inputs and prints its outputs, or saves "
                       "them to an .npz file named by output.")
    p.add_argument("model", metavar="MODEL", help="an ONNX model file")
    p.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input of the model from a .npy file (repeat for each input; NAME may be left out when "
                   "the model has one input)")
    p.add_argument("--save", "-o", metavar="OUT.npz", help="save the outputs to this .npz file instead of printing")
    p.add_argument("--precision", type=_non_negative_int, default=4, help="digits printed (default: 4)")
    p.add_argument("--threshold", type=int, default=200, help="print arrays larger than this summarised (default: 200)")
    p = sub.add_parser("bench", help="measure a model's sync and async throughput and latency",
                       description="Runs MODEL on random inputs (symbolic dims set to --batch) for --seconds "
                       "with run_graph in a loop, then with run_graph_async at --in-flight concurrent requests, and "
                       "prints runs per second and p50/p99 latency of each.")
    p.add_argument("model", metavar="MODEL", help="an ONNX model file")
    p.add_argument("--batch", type=_positive_int, default=1, help="size of symbolic dims (default: 1)")
    p.add_argument("--seconds", type=_positive_float, default=3.0, help="time per measurement (default: 3)")
    p.add_argument("--in-flight", type=_positive_int, default=64, help="concurrent async requests (default: 64)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    _add_loop_option(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["check"]:  # its options (--help included) are the check's own
        return check(argv[1:])
    parser = make_parser()
    args = parser.parse_args(argv)
    if getattr(args, "loop", None):
        args.loop_backend, args.loop_options = _LOOPS[args.loop]
        if args.loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
            parser.error("--loop uvloop: the uvloop package is not installed (pip install uvloop)")
        if args.loop == "trio" and importlib.util.find_spec("trio") is None:
            parser.error("--loop trio: the trio package is not installed (pip install trio)")
    try:
        if args.command == "info":
            return info()
        if args.command == "demo":
            return demo(args)
        if args.command == "run":
            return run(args)
        return bench(args)
    except UsageError as exc:
        print(f"{parser.prog} {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
