"""prefix_pages: the pages of the longest prefix ever indexed through each page, raised lazily.

Linking a page at depth d raises prefix_pages to d along all its ancestors. A request indexing
its generated tokens extends its chain a page at a time, so raising at once walks the whole
prefix for every page (O(depth) per page, most of an engine arm's indexing). Here a chain's
raise waits instead: its entry holds the tail's ancestor path, which grows by the page linked
(O(1) per page), and the depth to raise it to; the raise is applied once, before anyone can
read a page it covers. Only eviction reads prefix_pages, and only of pages no request holds: a
request's chain goes up through pages it holds, so its raise is applied when it releases them
(`on_released`), and a round first checks that no page it scores still waits (`settle_any`).

A raise is a max, so raises applied late and in any order give the values raising at once gives,
as long as they follow the same links: whatever changes a link (a removal, a page linked again)
first applies every waiting raise. Raising at once stops at the first ancestor already as deep;
applied late, a raise is the max over the whole path: the same while a parent's value is never
below its child's, which holds unless a page is linked again under another parent. From the
first such relink on (and for hash_only, whose chains may hang under pages no request holds)
raises are applied at once, with the stop.
"""

from __future__ import annotations

import numpy as np

ROOT = -1
# Chain tails whose ancestor paths are remembered after their raise: the next turn of a
# conversation, or the next page of a request, continues from there without a walk.
PATH_MEMO_TAILS = 64
MAX_WAITING = 60_000  # waiting chains (a held count fits 16 bits); past it all are applied
# Ancestor paths hold page ids: int32, as the index's links (half the bytes of int64; at 256
# nodes the waiting and remembered paths are ~100 MB in int64)
PATH_DTYPE = np.int32


class PrefixDepths:
    def __init__(self, parent: np.ndarray, depth: np.ndarray, lazy: bool):
        num_pages = parent.shape[0]
        self.parent, self.depth = parent, depth  # the index's links (read only)
        self.values = np.zeros(num_pages, dtype=np.int32)  # prefix_pages, once settled
        self.lazy = lazy
        # chain tail -> (its ancestors root first in buffer[:length], buffer, depth to raise to);
        # the buffer has room to grow
        self._waiting: dict[int, tuple[np.ndarray, int, int]] = {}
        # waiting raises whose path (or tail) has the page (at most MAX_WAITING of them)
        self._held = np.zeros(num_pages, dtype=np.uint16)
        # chain tail -> (links version, buffer, length): its ancestors, trusted as they are
        # while no indexed page has changed its parent since (the version is the same); a
        # removal drops the paths of the tails it removes (it removes every tail below a
        # removed page), other paths stand
        self._paths: dict[int, tuple[int, np.ndarray, int]] = {}
        self.version = 0

    # -- links ---------------------------------------------------------------------------------
    def linked(
        self, pages: list[int], parent: int, deepest: int, arr: np.ndarray | None = None
    ) -> None:
        """A chain of new pages (parent first) was linked under `parent`; the last is at depth
        `deepest`, which every page of the chain and their ancestors are raised to. arr: the
        pages as an int64 array, when the caller has one (not converted again)."""
        if len(pages) == 1:
            self.values[pages[0]] = deepest
        else:
            if arr is None:
                arr = np.array(pages, dtype=np.int64)
            self.values[arr] = deepest
        if len(self._waiting) >= MAX_WAITING:
            self.settle()
        entry = self._waiting.pop(parent, None) if self.lazy else None
        if entry is None:
            buffer, length = self._path_to(parent)
            if self.lazy:
                self._held[buffer[:length]] += 1
            else:
                self._raise_now(buffer, length, deepest)
        else:  # the chain goes on: its raise covers the last one's (the old tail stays held)
            buffer, length, _ = entry
            if length < buffer.size:  # (one scalar write: the usual case)
                buffer[length] = parent
                length += 1
            else:
                buffer, length = _extend(buffer, length, (parent,))
        if arr is not None:
            start = length
            buffer, length = _extend(buffer, length, arr[:-1])
            if self.lazy:
                self._held[buffer[start:length]] += 1
        if self.lazy:
            self._waiting[pages[-1]] = (buffer, length, deepest)
            self._held[pages[-1]] += 1  # the tail too: its entry goes before it is removed
        else:
            self._remember(pages[-1], buffer, length)

    def relinking(self) -> None:
        """An indexed page is about to change its parent: raises from now on are applied at once
        (with it a parent may be below its child)."""
        self.settle()
        self.lazy = False
        self.version += 1

    def removing(self, pages: np.ndarray) -> None:
        """These indexed pages (and every indexed child of theirs) are about to leave the index."""
        self.settle_any(pages)

    def removed(self, indexed: np.ndarray) -> None:
        """The removal is done: the remembered paths of removed tails go."""
        for tail in [t for t in self._paths if not indexed[t]]:
            del self._paths[tail]

    def unlinking(self) -> None:
        """One page leaves the index, its children may stay for now (`IndexBase.remove`)."""
        self.settle()
        self.version += 1

    # -- waiting raises ----------------------------------------------------------------------
    def settle(self) -> None:
        """Apply every waiting raise."""
        for tail in list(self._waiting):
            self._apply(tail)

    def settle_any(self, pages: np.ndarray) -> None:
        """Apply every waiting raise if one covers any of these pages."""
        if self._waiting and self._held[pages].any():
            self.settle()

    def on_released(self, pages: list[int], unheld: np.ndarray) -> None:
        """A request released `pages`; `unheld` lost their last holder (a round may score them):
        the raises of the request's chains are applied, and any other raise covering them."""
        if not self._waiting or not self._held[unheld].any():
            return
        for tail in list(filter(self._waiting.__contains__, pages)):  # (in order, C-level)
            self._apply(tail)
        self.settle_any(unheld)

    def _apply(self, tail: int) -> None:
        buffer, length, deepest = self._waiting.pop(tail)
        path = buffer[:length]
        self.values[path] = np.maximum(self.values[path], deepest)
        self._held[path] -= 1
        self._held[tail] -= 1
        # remembered without its room to grow (up to half the buffer, and a walked path's
        # buffer is twice the path): at 256 nodes that room was ~25 MB
        self._remember(tail, path.copy(), length)

    # -- paths -------------------------------------------------------------------------------
    def _raise_now(self, buffer: np.ndarray, length: int, deepest: int) -> None:
        """Raise at once: from the parent up, each page below `deepest`, to the first one
        already as deep."""
        path = buffer[length - 1 :: -1] if length else buffer[:0]
        low = self.values[path] < deepest
        self.values[path[: path.size if low.all() else int(np.argmin(low))]] = deepest

    def _path_to(self, page: int) -> tuple[np.ndarray, int]:
        """`page` and its ancestors, root first, in buffer[:length] (empty for ROOT)."""
        if page == ROOT:
            return np.zeros(16, dtype=PATH_DTYPE), 0
        memo = self._paths.pop(page, None)
        if memo is not None:
            version, buffer, length = memo
            if version == self.version or self._still_linked(page, buffer[:length]):
                return _extend(buffer, length, (page,))
        path = []
        while page != ROOT:
            path.append(page)
            page = int(self.parent[page])
        return _extend(np.zeros(2 * len(path), dtype=PATH_DTYPE), 0, path[::-1])

    def _still_linked(self, page: int, ancestors: np.ndarray) -> bool:
        """Do the parent links still give `page` these ancestors (root first)?"""
        if ancestors.size == 0:
            return bool(self.parent[page] == ROOT)
        return bool(
            self.parent[page] == ancestors[-1]
            and (self.parent[ancestors[1:]] == ancestors[:-1]).all()
            and self.parent[ancestors[0]] == ROOT
        )

    def _remember(self, tail: int, buffer: np.ndarray, length: int) -> None:
        self._paths[tail] = (self.version, buffer, length)
        if len(self._paths) > PATH_MEMO_TAILS:
            del self._paths[next(iter(self._paths))]  # the oldest


def _extend(buffer: np.ndarray, length: int, pages) -> tuple[np.ndarray, int]:
    """Append `pages` to buffer[:length], growing it by half."""
    end = length + len(pages)
    if end > buffer.size:
        grown = np.zeros(max(buffer.size + buffer.size // 2, end), dtype=PATH_DTYPE)
        grown[:length] = buffer[:length]
        buffer = grown
    buffer[length:end] = pages
    return buffer, end
