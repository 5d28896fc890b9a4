"""PNG charts of the benchmarks (matplotlib, from the `bench` extra: `pip install -e .[bench]`).

Each series is (label, xs, ys). Without matplotlib the benchmark still runs and prints its
numbers; only the picture is skipped (with a note on stderr).
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

Series = tuple[str, Sequence[float], Sequence[float]]


def save_png(path: Path, series: Sequence[Series], *, title: str, xlabel: str, ylabel: str,
             log_y: bool = True, note: str = "") -> bool:
    """Write a line chart to `path`; False (and a note on stderr) if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"no matplotlib (pip install -e .[bench]): {path} not written", file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    for label, xs, ys in series:
        ax.plot(xs, ys, marker="o" if len(xs) <= 20 else None, markersize=4, linewidth=1.5, label=label)
    if log_y:
        from matplotlib.ticker import FuncFormatter

        ax.set_yscale("log")
        plain = FuncFormatter(lambda y, _: f"{y:g}")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: ""))
    ax.set_title(title, fontsize=11)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    if note:
        fig.subplots_adjust(bottom=0.17)
        fig.text(0.01, 0.01, textwrap.fill(note, 150), fontsize=7, alpha=0.7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    print(f"wrote {path}", file=sys.stderr)
    return True
