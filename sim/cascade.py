"""Cascade (shared-prefix) decode pricing: leading pages shared by several decodes read once.

A paged decode kernel reads every sequence's whole context, shared pages included; a cascade
kernel (kernels/cascade_decode.py) reads a group's shared leading pages once for all of the
group's query heads, then each sequence's own tail, and merges the two by log-sum-exp. This is
the article's "after a hit, decode reads less". With `node.decode_attention: cascade` a step's
decode attention is priced as the plain kernel over the tails plus the shared-prefix pass
(`LatencyModel.cascade_prefix_s`); the rest of the step is priced as before. The kernel runs the
prefixes of all of a step's groups in ONE launch (one work list, one split/combine), so the pass
is priced once, from the measured one-group table at the groups' summed size and their
size-weighted mean prefix: the same query x key pairs in one launch. (Priced per group, the
2-3-group steps of the H200 fidelity check came out 6-19% over; as one pass, within 5.4%:
kernels/README.md.)

Groups are found from the block tables themselves: decodes whose first page is the same physical
page share a prefix, as long as their page ids agree (the prefix index hands the same pages to
every request that hits them). The executors find them step after step with `SharingGroups`,
which compares only the pages appended since a group's last step (a block table only grows;
sim/kv/manager.py gives a request a new list when it starts over).
"""

from __future__ import annotations

from collections.abc import Sequence as Seq

from sim.executor import DecodePrices, ModelledExecutor, RemoteTransfer
from sim.latency.base import LatencyModel, StepShape, prices_decode_batch
from sim.scheduler import BatchItem, Step

# (id of the group's first block table, id of another) -> where they last differed
CommonPrefixMemo = dict[tuple[int, int], int]
MEMO_ENTRIES = 4096
GROUP_ENTRIES = 32  # SharingGroups: groups remembered (each holds its block tables)


def common_prefix(a: list[int], b: list[int], limit: int, memo: CommonPrefixMemo | None) -> int:
    """The first position below `limit` where the block tables differ, else `limit`. Tables only
    grow at the end between steps, so the position found last step usually holds: it is checked
    with two list comparisons (exact: equal before it, different at it) before any scan."""
    key = (id(a), id(b))
    if memo is not None:
        i = memo.get(key)
        if i is not None and i < limit and a[i] != b[i] and a[:i] == b[:i]:
            return i
    if a[:limit] == b[:limit]:
        return limit
    i = next(j for j in range(limit) if a[j] != b[j])
    if memo is not None:
        if len(memo) >= MEMO_ENTRIES:
            memo.clear()
        memo[key] = i
    return i


def shared_prefix_groups(
    items: list[BatchItem], page_size: int, memo: CommonPrefixMemo | None = None
) -> list[tuple[int, int]]:
    """(group size, shared tokens) of every group of >= 2 decodes sharing leading pages (`memo`:
    kept from step to step by the caller, it only saves time)."""
    return [(size, tokens) for size, tokens, _ in _groups(items, page_size, memo)]


def _groups(
    items: list[BatchItem], page_size: int, memo: CommonPrefixMemo | None
) -> list[tuple[int, int, bool]]:
    """(group size, shared tokens, whether the share is held down by a member's last page) of
    every sharing group."""
    by_first: dict[int, list[list[int]]] = {}
    for seq, _, is_prefill in items:
        if not is_prefill and seq.pages:
            by_first.setdefault(seq.pages[0], []).append(seq.pages)
    groups = []
    for tables in by_first.values():
        if len(tables) < 2:
            continue
        common = min(len(t) for t in tables)
        first = tables[0]
        for t in tables[1:]:
            common = common_prefix(first, t, common, memo)
        # Full pages only: the last page of a sequence is still being written.
        shared = min(common, min(len(t) for t in tables) - 1)
        if shared > 0:
            groups.append((len(tables), shared * page_size, shared < common))
    return groups


def span_groups(
    items: list[BatchItem], page_size: int, memo: CommonPrefixMemo | None
) -> list[tuple[int, int]] | None:
    """`shared_prefix_groups` of the batch and of every decode step it runs on (its decodes
    append pages of their own only); None when a group's share is held down by a member's last
    page, which becomes a shared one as that member decodes on."""
    return _uncapped(_groups(items, page_size, memo))


def _uncapped(groups: list[tuple[int, int, bool]]) -> list[tuple[int, int]] | None:
    """`span_groups` of a step's `_groups`."""
    if any(capped for *_, capped in groups):
        return None
    return [(size, tokens) for size, tokens, _ in groups]


# What a step's price takes from its sharing groups: the tokens its decodes re-read, and the
# cascade's prefix pass (query x key pairs, seconds) where a cascade prices it
GroupTerms = tuple[int, tuple[int, float] | None]

# id of a group's first block table -> (ids of its tables, the tables, the shortest table's
# length and the first position below it where the tables differ (or that length))
GroupEntry = tuple[tuple[int, ...], tuple[list[int], ...], int, int]


class SharingGroups:
    """`_groups` of step after step, each group's shared prefix found from its last step's.

    A decode's block table only grows, at its end (a request that starts over gets a new list),
    so while a group has the same table objects, in the same order, the pages compared at its
    last step still compare the same: a difference found then is still there, and if none was,
    only the pages appended since are compared. Grouping is the same; comparing is one C-level
    pass over the tables' ids instead of a list comparison per member (280,000 a cascade arm).
    The entries hold their tables, so an id is never another list's while it is remembered; the
    least recently used go past `max_entries` (a node runs a few groups at a time)."""

    def __init__(self, max_entries: int = GROUP_ENTRIES):
        self.max_entries = max_entries
        self._last: dict[int, GroupEntry] = {}

    def find(self, items: list[BatchItem], page_size: int) -> list[tuple[int, int, bool]]:
        """`_groups(items, page_size, None)`: the same groups, in the same order."""
        by_first: dict[int, list[list[int]]] = {}
        for seq, _, is_prefill in items:
            if not is_prefill:
                table = seq.pages
                if table:
                    by_first.setdefault(table[0], []).append(table)
        groups = []
        for tables in by_first.values():
            if len(tables) < 2:
                continue
            shortest = min(map(len, tables))
            common = self._common(tables, shortest)
            # Full pages only: the last page of a sequence is still being written.
            shared = min(common, shortest - 1)
            if shared > 0:
                groups.append((len(tables), shared * page_size, shared < common))
        return groups

    def _common(self, tables: list[list[int]], shortest: int) -> int:
        """The first position below `shortest` where a table differs from the first, else
        `shortest` (what `common_prefix` gives, member after member)."""
        ids, last = tuple(map(id, tables)), self._last
        entry = last.pop(ids[0], None)  # (put back last: the oldest entries go first)
        if entry is not None and entry[0] == ids and shortest >= entry[2]:
            _, _, compared, common = entry
            if common == compared < shortest:  # equal so far: compare the pages appended since
                common = _first_difference(tables, compared, shortest)
        else:
            common = _first_difference(tables, 0, shortest)
        last[ids[0]] = (ids, tuple(tables), shortest, common)
        if len(last) > self.max_entries:  # a group gone since: its tables are freed
            del last[next(iter(last))]
        return common


def _first_difference(tables: list[list[int]], start: int, end: int) -> int:
    """The first position in [start, end) where a table differs from the first (they agree
    before `start`), else `end`."""
    first = tables[0]
    for table in tables[1:]:
        if first[start:end] != table[start:end]:
            end = next(j for j in range(start, end) if first[j] != table[j])
    return end


def reread_tokens(groups: list[tuple[int, int]]) -> int:
    """Tokens the step's decodes read that another decode of the step reads too: each group
    reads its shared prefix once for every member but the first."""
    return sum((size - 1) * tokens for size, tokens in groups)


def shared_reads(
    items: list[BatchItem], page_size: int, memo: CommonPrefixMemo | None = None
) -> int:
    """`reread_tokens` of the step's sharing groups."""
    return reread_tokens(shared_prefix_groups(items, page_size, memo))


def longest_decode(items: list[BatchItem]) -> int:
    """The longest decode context of the step (as Step.shape counts it), 0 without decodes."""
    return max((seq.num_computed + 1 for seq, _, pre in items if not pre), default=0)


class DecodeBatchExecutor(ModelledExecutor):
    """The modelled executor for the plain paged decode kernel priced from its batch, not only
    from the decodes' count and context sum: a page several decodes of the step read is priced
    through L2 after its first read (sim/latency/shared_reads.py), and a batch of unequal
    contexts above the equal-length table (sim/latency/ragged.py), as the latency model has
    them measured. The price depends on the block tables and the longest context."""

    def __init__(
        self,
        latency: LatencyModel,
        transfer: RemoteTransfer | None,
        page_size: int,
        decode_prices: DecodePrices | None = None,
    ):
        super().__init__(latency, transfer, decode_prices)
        self.page_size = page_size
        self._groups = SharingGroups()
        # Does the model read a step's longest decode context? (The cascade's executor prices
        # without a ragged term too: then the longest context is not looked for.)
        self._reads_longest = prices_decode_batch(latency)

    def prices_decode_by_sum(self) -> bool:
        return False  # shared pages and the longest context come from the batch

    def decode_step_s(self, node_id: int, step: Step, decode_ctx_sum: int, now: float) -> float:
        return self.run_step(node_id, step, now)

    def compute_s(self, step: Step) -> float:
        groups = [
            (size, tokens) for size, tokens, _ in self._groups.find(step.items, self.page_size)
        ]
        return self._price(step.shape(), self._group_terms(groups), self._longest(step.items))

    def _longest(self, items: list[BatchItem]) -> int:
        """`longest_decode` where the model reads it (0, unknown, elsewhere: the same price)."""
        return longest_decode(items) if self._reads_longest else 0

    def decode_span_prices(self, step: Step, ctx_sums: Seq[int]) -> list[float] | None:
        """Prices of the decode span's steps 1, 2, ... after `step`: `compute_s` of each, the
        same floats. A decode appends pages of its own only, so the groups stay step 0's
        unless a member's last page holds a group's share down (then no span); the longest
        context grows by one token a step."""
        if self.transfer is not None:
            return None
        groups = _uncapped(self._groups.find(step.items, self.page_size))
        if groups is None:
            return None
        num_decode, longest = len(step.items), self._longest(step.items)
        terms = self._group_terms(groups)  # (the span's steps share them: priced once)
        return [  # (an unknown longest context stays unknown)
            self._price(StepShape([], [], num_decode, ctx_sum), terms, longest and longest + k)
            for k, ctx_sum in enumerate(ctx_sums, start=1)
        ]

    def _group_terms(self, groups: list[tuple[int, int]]) -> GroupTerms:
        """What a step's price takes from its sharing groups: the tokens re-read (no cascade)."""
        return reread_tokens(groups), None

    def _price(self, shape: StepShape, terms: GroupTerms, longest: int) -> float:
        """The plain kernel's price: its shared pages re-read from L2 and its longest context,
        where the model prices those."""
        shape.decode_shared_tokens = terms[0]
        shape.decode_ctx_max = longest
        return self.latency.shape_time_s(shape)


class CascadeExecutor(DecodeBatchExecutor):
    """The modelled executor with a cascade decode kernel: decode contexts shrink to their
    tails, plus one prefix pass for all groups.

    The engine launches the cascade only when it is faster than the plain kernel for the step
    (small batches pay the extra launches and gain little), as vLLM's cascade heuristic does."""

    def _group_terms(self, groups: list[tuple[int, int]]) -> GroupTerms:
        """Also the prefix pass of the groups (None without groups): its query x key pairs and
        its seconds."""
        if not groups:
            return reread_tokens(groups), None
        size, pairs = prefix_pass(groups)
        return reread_tokens(groups), (
            pairs,
            self.latency.cascade_prefix_s(size, round(pairs / size)),
        )

    def _price(self, shape: StepShape, terms: GroupTerms, longest: int) -> float:
        """The cheaper of the plain kernel and the cascade (tails plus one prefix pass)."""
        plain_s = super()._price(shape, terms, longest)
        if terms[1] is None:
            return plain_s
        pairs, prefix_s = terms[1]
        shape.decode_shared_tokens = 0  # the cascade reads each prefix once, tails are unique
        shape.decode_ctx_max = 0  # the tails are priced at their mean
        shape.decode_ctx_sum -= pairs
        cascade_s = self.latency.shape_time_s(shape)
        cascade_s += prefix_s
        return min(plain_s, cascade_s)


def prefix_pass(groups: list[tuple[int, int]]) -> tuple[int, int]:
    """(decodes, shared query x key pairs) of the one prefix launch of a step's groups; the
    pass is priced as that many decodes over pairs / decodes shared tokens."""
    size = sum(s for s, _ in groups)
    return size, sum(s * tokens for s, tokens in groups)
