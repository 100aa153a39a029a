"""Draws the recorded benchmark results (benchmarks/results/*.md) as charts for the documentation (docs/img/*.png).

    python benchmarks/plot_results.py [--results benchmarks/results] [--out-dir docs/img]

Needs matplotlib (`pip install ".[bench]"` or `".[docs]"`). The charts are drawn from the tables the benchmark
scripts write, so re-running a benchmark with --out and then this script keeps docs and results in step.
"""

from __future__ import annotations

import argparse
import pathlib
import re

HERE = pathlib.Path(__file__).resolve().parent


def read_table(path: pathlib.Path) -> list[dict[str, str]]:
    """The first markdown table of ``path`` as a list of {column: cell}."""
    rows: list[list[str]] = []
    for line in path.read_text().splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                rows.append(cells)
        elif rows:
            break
    if len(rows) < 2:
        raise ValueError(f"{path}: no markdown table found")
    header, body = rows[0], rows[1:]
    return [dict(zip(header, row, strict=True)) for row in body]


def number(cell: str) -> float:
    return float(cell.replace(",", "").rstrip("x"))


def plot_completions(rows: list[dict[str, str]], out: pathlib.Path) -> None:
    import matplotlib.pyplot as plt
    import numpy as np

    series = ["geasync run_graph_async", "sync run_graph loop", "asyncio.to_thread"]
    labels = [f"{r['loop']}\n{r['in flight']} in flight" for r in rows]
    x = np.arange(len(rows))
    width = 0.27
    fig, ax = plt.subplots(figsize=(9, 4.2), dpi=110)
    for i, name in enumerate(series):
        ax.bar(x + (i - 1) * width, [number(r[name]) / 1000 for r in rows], width, label=name)
    ax.set_xticks(x, labels)
    ax.set_ylim(0, max(number(r[name]) for r in rows for name in series) / 1000 * 1.25)
    ax.set_ylabel("thousand completions / s")
    ax.set_title("Completions per second, tiny graph (Add [1,16]), 2 cores")
    ax.legend(frameon=False, loc="upper center", ncol=3)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def plot_models(rows: list[dict[str, str]], out: pathlib.Path) -> None:
    import matplotlib.pyplot as plt
    import numpy as np

    labels = [f"{r['model']}, batch {r['batch']}" for r in rows]
    ratios = [number(r["twin / onnxruntime"]) for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(9, 5), dpi=110)
    ax.bar(x, ratios, 0.55, label="twin / onnxruntime latency")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(1.5, color="tab:red", linestyle="--", linewidth=1, label="target: at most 1.5")
    for xi, ratio in zip(x, ratios, strict=True):
        ax.text(xi, ratio + 0.02, f"{ratio:.2f}", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(x, labels, rotation=35, ha="right")  # model names are long: slanted labels do not overlap
    ax.set_ylim(0, max(1.9, max(ratios) + 0.4))
    ax.set_ylabel("latency ratio (lower is better)")
    ax.set_title("One synchronous run: twin vs onnxruntime, one thread each")
    ax.legend(frameon=False, loc="upper center", ncol=2)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


CHARTS = {"completions.md": ("completions.png", plot_completions), "models.md": ("models.png", plot_models)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=pathlib.Path, default=HERE / "results")
    parser.add_argument("--out-dir", type=pathlib.Path, default=HERE.parent / "docs" / "img")
    args = parser.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    matplotlib.rcParams["svg.hashsalt"] = "geasync"  # stable output
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for source, (image, plot) in CHARTS.items():
        out = args.out_dir / image
        plot(read_table(args.results / source), out)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
