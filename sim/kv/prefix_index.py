"""Two-level prefix index: a short hash screens, the exact tokens decide.

Level 1 maps a chained page key to a cached page. Level 2 compares the page's token ids and its
parent with the request's own before any reuse. A level-1 hit that fails level 2 is a false hit:
counted, never reused. In `hash_only` mode level 2 is skipped (the what-if of the article's
pitfall 1): a colliding page is reused and its tokens counted as wrong reuse.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ROOT = -1


@dataclass(slots=True)
class Match:
    pages: list[int]  # cached pages reused, in prefix order
    false_hits: int = 0  # level-1 hits rejected by the exact comparison
    wrong_reuse_tokens: int = 0  # tokens reused whose ids differ from the request's (hash_only)


class PrefixIndex:
    def __init__(self, num_pages: int, page_size: int, verify_tokens: bool = True):
        self.page_size = page_size
        self.verify_tokens = verify_tokens
        self.key_to_page: dict[int, int] = {}
        self.page_key = np.zeros(num_pages, dtype=np.uint64)
        self.parent = np.full(num_pages, ROOT, dtype=np.int64)
        self.depth = np.zeros(num_pages, dtype=np.int64)  # 1-based page position in its prefix
        self.indexed = np.zeros(num_pages, dtype=bool)
        self.tokens: list[np.ndarray | None] = [None] * num_pages
        self.children: dict[int, set[int]] = {}

    def __len__(self) -> int:
        return len(self.key_to_page)

    def match(self, keys: np.ndarray, prompt: np.ndarray, max_pages: int) -> Match:
        """Longest cached prefix of `prompt` (keys = its chained page keys), at most max_pages."""
        result = Match(pages=[])
        parent = ROOT
        for k in range(min(max_pages, keys.shape[0])):
            page = self.key_to_page.get(int(keys[k]))
            if page is None:
                break
            own = prompt[k * self.page_size : (k + 1) * self.page_size]
            same = self.parent[page] == parent and np.array_equal(self.tokens[page], own)
            if not same and self.verify_tokens:
                result.false_hits += 1
                break
            if not same:
                result.wrong_reuse_tokens += int((self.tokens[page] != own).sum()) or self.page_size
            result.pages.append(page)
            parent = page
        return result

    def insert(self, page: int, key: int, parent: int, tokens: np.ndarray) -> bool:
        """Index a freshly computed full page. False if its key is already taken."""
        if key in self.key_to_page:
            return False
        self.key_to_page[key] = page
        self.page_key[page] = key
        self.parent[page] = parent
        self.depth[page] = 1 if parent == ROOT else self.depth[parent] + 1
        self.indexed[page] = True
        self.tokens[page] = tokens
        if parent != ROOT:
            self.children.setdefault(parent, set()).add(page)
        return True

    def remove(self, page: int) -> list[int]:
        """Unindex a page; returns its children, which are now unreachable by prefix walks."""
        assert self.indexed[page]
        del self.key_to_page[int(self.page_key[page])]
        self.indexed[page] = False
        self.tokens[page] = None
        parent = int(self.parent[page])
        if parent != ROOT and parent in self.children:
            self.children[parent].discard(page)
        orphans = list(self.children.pop(page, ()))
        for child in orphans:
            self.parent[child] = ROOT
        return orphans
