"""Sweep plots as inline SVG strings: heatmap over two axes, line over one axis, Pareto scatter.

Axis values are matched by `_key` (numbers by value, the rest as text), so values read back
from the CSV line up with the plan's. Math text is off so a `$` in a
value is printed, not parsed; matplotlib escapes every string it writes into the SVG.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

_RC: dict[RcKeyType, Any] = {
    "svg.hashsalt": "kvsched-sweep",
    "text.parse_math": False,
    "font.size": 9,
}


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def _key(value) -> str:
    """Match key of an axis value: numbers by value (16 == 16.0, as the CSV may read them back),
    everything else by its text."""
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    try:
        return repr(float(value))
    except (TypeError, ValueError):
        return str(value)


def _mean_by(df: pd.DataFrame, keys: list[str], metric: str, agg: str = "mean") -> pd.Series:
    return df.assign(**{k: df[k].map(_key) for k in keys}).groupby(keys)[metric].agg(agg)


def heatmap_svg(
    df: pd.DataFrame,
    x: str,
    x_order: list,
    y: str,
    y_order: list,
    metric: str,
    label: str,
    agg: str = "mean",
) -> str:
    """A cell per (x, y) value pair: `agg` ("mean", "max", ...) of metric over the other axes."""
    means = _mean_by(df, [x, y], metric, agg)
    xs, ys = [_key(v) for v in x_order], [_key(v) for v in y_order]
    grid = np.full((len(ys), len(xs)), np.nan)  # [y value, x value]
    for (xv, yv), value in means.items():
        if xv in xs and yv in ys:
            grid[ys.index(yv), xs.index(xv)] = value
    with plt.rc_context(_RC):
        fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(xs), 1.0 + 0.45 * len(ys)))
        image = ax.imshow(grid, aspect="auto", cmap="viridis", origin="lower")
        for (i, j), value in np.ndenumerate(grid):
            if not np.isnan(value):
                ax.text(j, i, _short(value), ha="center", va="center", color="w", fontsize=7)
        x_labels, y_labels = [str(v) for v in x_order], [str(v) for v in y_order]
        ax.set_xticks(range(len(xs)), x_labels, rotation=30 if max(map(len, x_labels)) > 6 else 0)
        ax.set_yticks(range(len(ys)), y_labels)
        ax.set(xlabel=x, ylabel=y, title=label)
        fig.colorbar(image, ax=ax)
        return _svg(fig)


def _short(value: float) -> str:
    """A cell label: whole numbers from 100 up (1378, not 1.38e+03), else 3 significant digits."""
    return f"{value:.0f}" if 100 <= abs(value) < 1e7 else f"{value:.3g}"


def _numeric(values: list) -> np.ndarray | None:
    try:
        out = np.array([float(v) for v in values])
    except (TypeError, ValueError):
        return None
    return None if any(isinstance(v, bool | str) for v in values) else out


def line_svg(df: pd.DataFrame, x: str, x_order: list, metric: str, label: str) -> str:
    means = _mean_by(df, [x], metric)
    keys = [_key(v) for v in x_order]
    ys = np.array([means.get(k, np.nan) for k in keys])
    numeric = _numeric(x_order)
    with plt.rc_context(_RC):
        fig, ax = plt.subplots(figsize=(5.5, 3))
        if numeric is not None:
            ax.plot(numeric, ys, marker="o")
            if numeric.min() > 0 and numeric.max() / numeric.min() >= 8:
                ax.set_xscale("log", base=2)
        else:
            ax.plot(range(len(keys)), ys, marker="o")
            ax.set_xticks(range(len(keys)), [str(v) for v in x_order])
        ax.set(xlabel=x, ylabel=label, title=label)
        ax.grid(alpha=0.3)
        return _svg(fig)


def pareto_svg(
    df: pd.DataFrame, front: pd.DataFrame, x: str, y: str, x_label: str, y_label: str
) -> str:
    with plt.rc_context(_RC):
        fig, ax = plt.subplots(figsize=(5.5, 3.5))
        ax.scatter(df[x], df[y], color="0.7", s=14, label="configurations")
        ordered = front.sort_values(x)
        ax.plot(ordered[x], ordered[y], color="C3", marker="o", ms=5, label="Pareto front")
        for _, row in ordered.iterrows():
            ax.annotate(
                str(int(row["point"])),
                (row[x], row[y]),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
        ax.set(xlabel=x_label, ylabel=y_label, title=f"{x_label} vs {y_label} (labels: point)")
        ax.grid(alpha=0.3)
        ax.legend()
        return _svg(fig)
