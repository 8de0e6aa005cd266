"""Two-level prefix index: a short hash screens, the exact tokens decide (the article's design).

Level 1 maps a chained page key (sim/kv/hashing.py, `hash_bits` wide) to a cached page. Level 2
compares that page's token ids and its parent with the request's own before any reuse; since the
parent must be the page matched one position earlier, a hit on page k means the whole prefix up to
k is identical. A level-1 hit that fails level 2 is a false hit: counted, never reused, and the
walk stops. Colliding pages are all indexed: the first takes the level-1 slot, the others go to an
overflow table keyed by (key, parent), searched only when the slot misses or fails.

`hash_only` (verify=False) is the article's pitfall 1: level 1 is trusted alone. A colliding page is
reused; each reused page that is not the request's own is counted as a false hit and its
page_size tokens as wrong reuse (its KV was computed for other tokens or another prefix).

Token ids live in one copy of every indexed page's ids (so a finished prompt can be freed;
sim/kv/page_tokens.py keeps them in ~2.1 bytes a token), which makes level 2 a few vectorised
comparisons per lookup.
"""

from __future__ import annotations

import numpy as np

from sim.kv.index_base import ROOT, IndexBase, Match
from sim.kv.page_slots import new_page_slots
from sim.kv.page_tokens import PageTokens


class TwoLevelIndex(IndexBase):
    def __init__(self, num_pages: int, page_size: int, verify_tokens: bool = True):
        # hash_only hangs a chain under a key's holder, a page its request may not hold: its
        # prefix_pages raises are applied at once (sim/kv/prefix_depth.py)
        super().__init__(num_pages, page_size, lazy_raises=verify_tokens)
        self.verify_tokens = verify_tokens
        # hash_only keeps no token ids (modelled bytes); the simulator still fills page_tokens as
        # ground truth, to count wrong reuse.
        self.token_copy = verify_tokens
        self.key_to_page = new_page_slots(self.page_key)  # level 1: one slot per short key
        self.overflow: dict[tuple[int, int], list[int]] = {}  # (key, parent) -> colliding pages
        # Until a page first goes to the overflow, level 1 holds exactly the keys of the indexed
        # pages (each holds its own slot): the routing table may read it as the node's entries.
        self.overflow_used = False
        self.page_tokens = PageTokens(num_pages, page_size)

    # -- lookup ------------------------------------------------------------------------------
    def match(self, keys: np.ndarray, prompt: np.ndarray, max_pages: int) -> Match:
        """Longest cached prefix of `prompt` (keys = its chained page keys), at most max_pages."""
        keys_list = keys[:max_pages].tolist()
        out = Match(pages=[])
        slots = self.key_to_page
        while len(out.pages) < len(keys_list):
            start = len(out.pages)
            run = slots.run(keys_list[start:])
            parent = out.pages[-1] if out.pages else ROOT
            if not self.verify_tokens:  # trust level 1: take the whole run, count what is wrong
                run = _until_repeat(run)
                bad = int((~self._exact(run, start, parent, prompt)).sum()) if run else 0
                out.pages += run
                out.false_hits += bad
                out.wrong_reuse_tokens += bad * self.page_size
                break
            good = self._exact_prefix(run, start, parent, prompt) if run else 0
            out.pages += run[:good]
            pos = start + good
            if pos >= len(keys_list):
                break
            found = self._overflow_exact(
                keys_list[pos], out.pages[-1] if out.pages else ROOT, prompt, pos
            )
            if found is not None:
                out.pages.append(found)
                continue
            out.false_hits += int(good < len(run))  # the slot held a page with another prefix
            break
        return out

    def _own(self, prompt: np.ndarray, start: int, n: int) -> np.ndarray:
        p = self.page_size
        return prompt[start * p : (start + n) * p].reshape(n, p)

    def _exact(self, run: list[int], start: int, parent: int, prompt: np.ndarray) -> np.ndarray:
        """bool per page of `run`: same parent chain and same tokens as the request's page."""
        pages = np.array(run, dtype=np.int64)
        expected_parent = np.concatenate(([parent], pages[:-1]))
        same_tokens = self.page_tokens.same(pages, self._own(prompt, start, len(run)))
        return (self.parent[pages] == expected_parent) & same_tokens & self.indexed[pages]

    def _exact_prefix(self, run: list[int], start: int, parent: int, prompt: np.ndarray) -> int:
        ok = self._exact(run, start, parent, prompt)
        return len(run) if ok.all() else int(np.argmin(ok))

    def _overflow_exact(self, key: int, parent: int, prompt: np.ndarray, pos: int) -> int | None:
        if not self.overflow:
            return None
        own = self._own(prompt, pos, 1)[0]
        for page in self.overflow.get((key, parent), ()):
            if self.page_tokens.equal(page, own):
                return page
        return None

    # -- updates -----------------------------------------------------------------------------
    def insert_chain(
        self, pages: list[int], keys: list[int], parent: int, tokens: np.ndarray
    ) -> list[int]:
        """Index consecutive full pages of one prefix, the first hanging under `parent`.

        tokens: int32 [len(pages), page_size]; the pages are not indexed yet (the cache's
        `store_pages` skips those that are), so a key that ends up held by its own page was free.
        Returns the positions (in `pages`) indexed. Level 2
        on: a leading run, stopping at the first page already indexed under another id (a
        duplicate: nothing below it would be reachable through this chain). hash_only: see
        `_insert_trusting`.
        """
        if not self.verify_tokens:
            return self._insert_trusting(pages, keys, parent, tokens)
        count = 0
        if not self.overflow:  # fast path: leading keys that nobody holds (this chain included)
            count = self._claim_leading(pages, keys)
        while count < len(pages):
            chain_parent = pages[count - 1] if count else parent
            if not self._insert_one(pages[count], keys[count], chain_parent, tokens[count]):
                break
            count += 1
        self._link_run(pages, keys, tokens, 0, count, parent)
        return list(range(count))

    def insert_page(self, page: int, key: int, parent: int, tokens: np.ndarray) -> bool:
        """`insert_chain` of one page (a request's generated page, ~80,000 an engine arm): the
        same slot claim and links, without the chain's lists and arrays."""
        slots = self.key_to_page
        if self.verify_tokens and self.overflow:
            if not self._insert_one(page, key, parent, tokens):
                return False
        else:
            size = len(slots)
            slots.setdefault(key, page)  # one dict operation: a taken key leaves the size as it was
            if len(slots) == size and (
                not self.verify_tokens or not self._insert_one(page, key, parent, tokens)
            ):
                return False  # hash_only trusts the holder: nothing is indexed
        self._link_one(page, key, parent)
        self.page_tokens.write_one(page, tokens)
        return True

    def _claim_leading(self, pages: list[int], keys: list[int]) -> int:
        """Claim the slots of the chain's leading keys that nobody holds (the chain included):
        how many. One batch of claims (setdefault, key by key) takes every free key and never
        overwrites a holder; the usual chain (every key free, none repeated) is then done. Else the leading
        run ends at the first key whose slot holds another page, and the keys claimed after it
        are given back (a slot holding its own page was free: indexed pages hold their slots)."""
        slots = self.key_to_page
        size = len(slots)
        holders = slots.claim(keys, pages)
        if len(slots) == size + len(keys):
            return len(keys)
        count = next(
            i for i, (held, page) in enumerate(zip(holders, pages, strict=True)) if held != page
        )
        tail = zip(keys[count:], holders[count:], pages[count:], strict=True)
        slots.pop_many([key for key, held, page in tail if held == page])
        return count

    def _insert_trusting(
        self, pages: list[int], keys: list[int], parent: int, tokens: np.ndarray
    ) -> list[int]:
        """hash_only, as a hash-keyed block cache does it: a taken key is trusted to be this very
        page, so the page is not indexed again and the chain goes on under the page holding it."""
        slots = self.key_to_page
        placed: list[int] = []
        start = 0
        for i, (key, page) in enumerate(zip(keys, pages, strict=True)):
            holder = slots.setdefault(key, page)
            if holder == page:  # the key was free (the chain's pages are not indexed yet)
                placed.append(i)
                continue
            self._link_run(pages, keys, tokens, start, i, parent)
            start, parent = i + 1, holder
        self._link_run(pages, keys, tokens, start, len(pages), parent)
        return placed

    def _link_run(
        self,
        pages: list[int],
        keys: list[int],
        tokens: np.ndarray,
        start: int,
        end: int,
        parent: int,
    ) -> None:
        if end - start == 1:
            self._link(pages[start:end], keys[start:end], parent)
            self.page_tokens.write_one(pages[start], tokens[start])
        elif end > start:
            arr = self._link(pages[start:end], keys[start:end], parent)
            assert arr is not None  # (None only for one page)
            self.page_tokens.write(arr, tokens[start:end])

    def stand_in(self, key: int) -> int | None:
        """hash_only: the page a request's unindexed page is trusted to be (the key's holder)."""
        return None if self.verify_tokens else self.key_to_page.get(key)

    def _insert_one(self, page: int, key: int, parent: int, tokens: np.ndarray) -> bool:
        """Slow path: place one page behind a taken slot or in the overflow; False if a duplicate."""
        bucket = self.overflow.get((key, parent), [])
        if any(self.page_tokens.equal(p, tokens) for p in bucket):
            return False
        holder = self.key_to_page.setdefault(key, page)
        if holder == page:  # the key was free (a page not indexed yet holds no slot)
            return True
        if self.parent[holder] == parent and self.page_tokens.equal(holder, tokens):
            return False
        self.overflow.setdefault((key, parent), []).append(page)
        self.overflow_used = True
        return True

    def _forget(self, pages: np.ndarray, keys: list[int]) -> None:
        slots = self.key_to_page
        if not self.overflow:  # every indexed page holds its key's slot: one batch
            held = pages.tolist()
            if slots.pop_many(keys) != held:
                raise AssertionError(f"a page of {held} did not hold its slot")
            return
        for page, key, parent in zip(
            pages.tolist(), keys, self.parent[pages].tolist(), strict=True
        ):
            if slots.get(key) == page:
                del slots[key]
            else:
                bucket = self.overflow[(key, parent)]
                bucket.remove(page)
                if not bucket:
                    del self.overflow[(key, parent)]


def _until_repeat(run: list[int]) -> list[int]:
    """hash_only: a colliding key can point back to a page already in this prefix; stop there
    (a page sits at one position of a prefix, so a block table cannot list it twice)."""
    seen: set[int] = set()
    for i, page in enumerate(run):
        if page in seen:
            return run[:i]
        seen.add(page)
    return run
