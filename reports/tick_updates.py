"""An axis's ticks placed once per layout state while a figure draws, not once per question.

Drawing a figure with constrained layout, matplotlib asks each axis for its ticks (locations,
labels, which are in view) again and again: for the axis's own extent and for each spine's, in
each of the layout's two passes (the axes move between them), for the labels of shared axes,
and once more to draw. Between two moves the answer cannot change: it is a function of the view
limits, the axes' box in pixels, the scale, the locators and the formatters, all fixed while a
figure draws save the limits and the box. `memoized` answers a repeated question from the
previous answer (about 60% of them in the default study's report; the same ticks, so the same
bytes).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from matplotlib.axis import Axis

# matplotlib's own update (a private method), which the memo calls when the state is new
_update = Axis._update_ticks  # type: ignore[attr-defined]


@contextmanager
def memoized() -> Iterator[None]:
    """Within this context an axis recomputes its ticks only when its state changed. Enter it
    around one figure's draw only: it does not see tick parameters or data change."""
    axis_to_last: dict[Axis, tuple[tuple, list]] = {}

    def update(axis: Axis) -> list:
        state = _state(axis)
        last = axis_to_last.get(axis)
        if last is None or last[0] != state:
            last = axis_to_last[axis] = (state, _update(axis))
        return list(last[1])

    Axis._update_ticks = update  # type: ignore[attr-defined]
    try:
        yield
    finally:
        Axis._update_ticks = _update  # type: ignore[attr-defined]


def _state(axis: Axis) -> tuple:
    """What an axis's ticks depend on while its figure draws."""
    return (
        tuple(axis.get_view_interval()),
        axis.axes.bbox.bounds,
        axis.get_scale(),
        axis.get_major_locator(),
        axis.get_minor_locator(),
        axis.get_major_formatter(),
        axis.get_minor_formatter(),
    )
