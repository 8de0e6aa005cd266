"""Grids of small-multiple panels (one per node) that several figures draw in turn.

Building a figure's axes and ticks costs matplotlib more than drawing them, and the arms of a
run have as many nodes: one grid per panel count is built, and wiped before the next arm draws
on it. A wiped grid draws the same bytes as a new one (tests/reports/test_figures.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from matplotlib.figure import Figure

from reports.figures import new_figure

PanelGrid = tuple[Figure, np.ndarray]  # a figure and its 2-D array of axes
MAX_COLUMNS = 4


def panel_grid(num_panels: int, grids: dict[int, PanelGrid]) -> PanelGrid:
    """Up to MAX_COLUMNS panels a row sharing both axes: the grid kept in `grids` for this many
    panels, wiped, or a new one, kept there. Cells past the last panel are hidden."""
    if num_panels in grids:
        return _wiped(*grids[num_panels])
    ncols = min(MAX_COLUMNS, num_panels)
    nrows = math.ceil(num_panels / ncols)
    fig, axes = new_figure(
        nrows, ncols, width=2.6 * ncols + 1.6, height=2.0 * nrows + 0.6, sharex=True, sharey=True
    )
    for ax in list(axes.flat)[num_panels:]:
        ax.set_visible(False)
    grids[num_panels] = (fig, axes)
    return fig, axes


def _wiped(fig: Figure, axes: np.ndarray) -> PanelGrid:
    """The grid as new: no lines, areas or legend; no data limits; each axes back at its
    subplot's position (where constrained layout starts)."""
    for ax in axes.flat:
        for artist in [*ax.collections, *ax.lines]:
            artist.remove()
        if (legend := ax.get_legend()) is not None:
            legend.remove()
        ax.relim()
        ax.set_subplotspec(ax.get_subplotspec())
    return fig, axes


@contextmanager
def limits_fitted_once(axes: np.ndarray) -> Iterator[None]:
    """Within this context the axes' limits are not refitted; on leaving, they are fitted once
    to all their data. matplotlib refits a shared grid's limits before it adds each filled area
    (each layer of each panel), from the data drawn so far; the last fit, from all the data, is
    the one drawn, and it is the one made here."""
    for ax in axes.flat:
        ax.set_autoscale_on(False)
    try:
        yield
    finally:
        for ax in axes.flat:
            ax.set_autoscale_on(True)
        axes.flat[0].autoscale_view()
