"""``python -m geasync check MODEL.onnx``: will this ONNX model run on geasync's twin?

Lists every problem the twin finds (all unsupported nodes, not only the first, each with its node, operator and
reason), the graph's inputs and outputs (names, dtypes, shapes) and the opset. Exit code, for CI: 0 when every model
given runs on the twin, 1 when one does not, 2 when a file cannot be read. Models whose weights are stored as
external data are read with those files (beside the model, as ONNX defines).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any, TextIO

from . import _lib
from .graph import Graph


@dataclasses.dataclass(frozen=True)
class ValueReport:
    name: str
    dtype: str
    shape: tuple[int | None, ...]  # None = a symbolic / unknown dim

    def __str__(self) -> str:
        dims = ", ".join("?" if d is None else str(d) for d in self.shape)
        return f"{self.name}: {self.dtype}[{dims}]"


@dataclasses.dataclass(frozen=True)
class CheckReport:
    source: str
    ir_version: int
    opset: int
    inputs: tuple[ValueReport, ...]
    outputs: tuple[ValueReport, ...]
    problems: tuple[str, ...]

    @property
    def runs_on_twin(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["runs_on_twin"] = self.runs_on_twin
        return d


def _value(fields: list[str]) -> ValueReport:
    name, dtype, dims = (fields + ["", "", ""])[:3]
    shape = tuple(None if d == "-1" else int(d) for d in dims.split(",") if d)
    return ValueReport(name, dtype, shape)


def check_model(source: Any) -> CheckReport:
    """Checks an ONNX model (a path, ModelProto bytes or an ``onnx.ModelProto``) against the twin."""
    graph = Graph.from_onnx(source)
    text = _lib.twin_check_onnx(graph.model_bytes)
    info: dict[str, int] = {}
    inputs: list[ValueReport] = []
    outputs: list[ValueReport] = []
    problems: list[str] = []
    for line in text.splitlines():
        kind, _, rest = line.partition("\t")
        if kind in ("ir_version", "opset"):
            info[kind] = int(rest)
        elif kind == "input":
            inputs.append(_value(rest.split("\t")))
        elif kind == "output":
            outputs.append(_value(rest.split("\t")))
        elif kind == "problem":
            problems.append(rest)
    name = graph.name or (source if isinstance(source, str) else "<model>")
    return CheckReport(str(name), info.get("ir_version", 0), info.get("opset", 0), tuple(inputs), tuple(outputs),
                       tuple(problems))


def format_report(report: CheckReport) -> str:
    lines = [f"{report.source}: opset {report.opset}, IR version {report.ir_version}"]
    lines += ["  inputs:"] + [f"    {v}" for v in report.inputs]
    lines += ["  outputs:"] + [f"    {v}" for v in report.outputs]
    if report.runs_on_twin:
        lines.append("  runs on the twin: yes")
    else:
        lines.append(f"  runs on the twin: no ({len(report.problems)} problem(s))")
        lines += [f"    - {p}" for p in report.problems]
    return "\n".join(lines)


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    stream = sys.stdout if out is None else out
    parser = argparse.ArgumentParser(prog="python -m geasync check",
                                     description="Check whether ONNX models run on geasync's twin.")
    parser.add_argument("models", nargs="+", metavar="MODEL.onnx")
    parser.add_argument("--json", action="store_true", help="one JSON object per model, one per line")
    args = parser.parse_args(argv)
    status = 0
    for path in args.models:
        try:
            report = check_model(path)
        except (OSError, ValueError) as exc:
            print(f"{path}: cannot read the model: {exc}", file=stream)
            status = 2
            continue
        print(json.dumps(report.as_dict()) if args.json else format_report(report), file=stream)
        if not report.runs_on_twin and status == 0:
            status = 1
    return status
