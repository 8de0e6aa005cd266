"""Text layouts measured once per report, not once per pass.

matplotlib lays a text out (finds its font, reads the font's line metrics, measures each line,
rotates and aligns the box) every time anything asks for its extent: each of constrained
layout's two passes and the final draw ask for every tick label, title and legend entry, and
the report's figures share most of those strings ("0", "200", "simulated time (s)"). The
layout is a pure function of the text and its font, alignment, rotation and dpi; its position
is applied by the caller. `memoized` keeps one layout per such key while a report renders (a
quarter of the default study's report CPU; the same layouts, so the same bytes).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from matplotlib.text import Text

# matplotlib's own layout (a private method), which the memo calls on a miss
_measure = Text._get_layout  # type: ignore[attr-defined]


@contextmanager
def memoized() -> Iterator[None]:
    """Within this context every Text layout is computed once per key (reentrant)."""
    # An enclosing context already memoizes: its layouts serve this one too.
    if Text._get_layout is not _measure:  # type: ignore[attr-defined]
        yield
        return
    key_to_layout: dict[tuple, object] = {}

    def layout(text: Text, renderer):
        key = _key(text, renderer)
        if key is None:
            return _measure(text, renderer)
        if (found := key_to_layout.get(key)) is None:
            found = key_to_layout[_frozen(key)] = _measure(text, renderer)
        return found

    Text._get_layout = layout  # type: ignore[attr-defined]
    try:
        yield
    finally:
        Text._get_layout = _measure  # type: ignore[attr-defined]


def _key(text: Text, renderer) -> tuple | None:
    """Everything a layout depends on; None for the texts whose layout depends on where they
    are (wrapped text breaks at the figure edge; a transform may rotate the text)."""
    if text.get_wrap() or text.get_transform_rotates_text():
        return None
    return (
        type(renderer),
        text.figure.dpi,
        text.get_text(),
        text.get_fontproperties(),
        text.get_usetex(),
        text.get_parse_math(),
        text.get_linespacing(),
        text._get_multialignment(),  # type: ignore[attr-defined]
        text.get_horizontalalignment(),
        text.get_verticalalignment(),
        text.get_rotation(),
        text.get_rotation_mode(),
    )


def _frozen(key: tuple) -> tuple:
    """The key as stored: font properties are mutable (and hash by value), so a copy."""
    return (*key[:3], key[3].copy(), *key[4:])
