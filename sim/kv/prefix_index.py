"""Two-level prefix index: a short hash screens, the exact tokens decide.

Level 1 maps a chained page key to a cached page. Level 2 compares the page's token ids and its
parent with the request's own before any reuse. A level-1 hit that fails level 2 is a false hit:
counted, never reused. In `hash_only` mode level 2 is skipped (the what-if of the article's
pitfall 1): a colliding page is reused and its differing tokens counted as wrong reuse.

Token ids of indexed pages live in one [num_pages, page_size] table (a copy, so a finished
prompt can be freed), which makes level 2 one vectorised comparison per lookup.
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
        self.token_table = np.zeros((num_pages, page_size), dtype=np.int32)
        self.children: dict[int, set[int]] = {}

    def __len__(self) -> int:
        return len(self.key_to_page)

    def match(self, keys: np.ndarray, prompt: np.ndarray, max_pages: int) -> Match:
        """Longest cached prefix of `prompt` (keys = its chained page keys), at most max_pages."""
        candidates = []
        lookup = self.key_to_page.get
        for key in keys[:max_pages].tolist():
            page = lookup(key)
            if page is None:
                break
            candidates.append(page)
        if not candidates:
            return Match(pages=[])
        pages = np.array(candidates, dtype=np.int64)
        expected_parent = np.concatenate(([ROOT], pages[:-1]))
        own = prompt[: pages.size * self.page_size].reshape(pages.size, self.page_size)
        differs = self.token_table[pages] != own  # [num_candidates, page_size]
        ok = (self.parent[pages] == expected_parent) & ~differs.any(axis=1)
        if ok.all():
            return Match(pages=candidates)
        if self.verify_tokens:
            first_bad = int(np.argmin(ok))
            return Match(pages=candidates[:first_bad], false_hits=1)
        bad = ~ok
        wrong = int(differs[bad].sum()) + self.page_size * int((bad & ~differs.any(axis=1)).sum())
        return Match(pages=candidates, wrong_reuse_tokens=wrong)

    def insert_chain(self, pages: list[int], keys: list[int], parent: int, tokens: np.ndarray) -> int:
        """Index consecutive full pages of one prefix, the first hanging under `parent`.

        tokens: int32 [len(pages), page_size]. Stops at the first key already taken (its page
        stays unindexed, so nothing below it is reachable). Returns how many were indexed.
        """
        count = 0
        taken = self.key_to_page
        for key in keys:
            if key in taken:
                break
            count += 1
        if count == 0:
            return 0
        new = pages[:count]
        arr = np.array(new, dtype=np.int64)
        taken.update(zip(keys[:count], new, strict=True))
        self.page_key[arr] = keys[:count]
        chain_parents = [parent, *new[:-1]]
        self.parent[arr] = chain_parents
        base = 0 if parent == ROOT else int(self.depth[parent])
        self.depth[arr] = np.arange(base + 1, base + 1 + count)
        self.indexed[arr] = True
        self.token_table[arr] = tokens[:count]
        for p, child in zip(chain_parents, new, strict=True):
            if p != ROOT:
                self.children.setdefault(p, set()).add(child)
        return count

    def remove(self, page: int) -> list[int]:
        """Unindex a page; returns its children, which are now unreachable by prefix walks."""
        del self.key_to_page[int(self.page_key[page])]
        self.indexed[page] = False
        parent = int(self.parent[page])
        if parent != ROOT:
            siblings = self.children.get(parent)
            if siblings is not None:
                siblings.discard(page)
        orphans = list(self.children.pop(page, ()))
        if orphans:
            self.parent[orphans] = ROOT
        return orphans
