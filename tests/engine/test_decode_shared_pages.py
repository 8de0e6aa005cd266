"""engine.check's shared-pages table: the layout it builds and the shares it reports (CPU,
Triton interpreter); the times themselves come from the GPU."""

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")

from engine.check import attention_shard, decode_shared_pages  # noqa: E402


def test_shares_of_a_tiny_table():
    heads = attention_shard("llama-3-8b", 8)  # 4 q / 1 KV heads, d 128
    out = decode_shared_pages(heads, "cpu", prefix=32, pool_pages=64, batches=(4,), tails=(5, 9))
    assert out["prefix"] == 32 and out["tails"] == [5, 9]
    assert set(out) == {"prefix", "pool_pages", "tails", "b4_g4", "b4_g1"}
    total = out["b4_g4"]["kv_tokens"]
    assert 4 * (32 + 5) <= total <= 4 * (32 + 9)
    assert out["b4_g4"]["duplicate_share"] == 0.0  # every sequence on its own pages
    # one group: three of the four sequences read the 32 prefix tokens another one reads
    assert out["b4_g1"]["kv_tokens"] == total
    assert out["b4_g1"]["duplicate_share"] == pytest.approx(3 * 32 / total)
    assert all(out[k]["ms"] > 0 for k in ("b4_g4", "b4_g1"))


def test_shard_heads():
    tp2 = attention_shard("article-70b", 2)
    assert (tp2.num_q_heads, tp2.num_kv_heads, tp2.head_dim) == (32, 4, 128)


def test_ragged_lengths_keep_the_mean_and_spread_with_sigma():
    import numpy as np

    from engine.check import ragged_lengths

    rng = np.random.default_rng(0)
    assert ragged_lengths(rng, 4, 100, 0.0).tolist() == [100] * 4
    spread = [ragged_lengths(rng, 64, 4096, s) for s in (0.35, 1.0)]
    for lens in spread:
        assert abs(lens.mean() - 4096) < 0.01 * 4096 and lens.min() >= 16
    assert spread[1].max() / spread[1].mean() > spread[0].max() / spread[0].mean()


def test_ragged_table_times_equal_and_ragged_batches_of_the_same_mean():
    from engine.check import decode_ragged

    heads = attention_shard("llama-3-8b", 8)
    out = decode_ragged(heads, "cpu", batches=(3,), means=(40,), sigmas=(0.0, 0.7), pool_pages=64)
    equal, ragged = out["b3_m40_s0.0"], out["b3_m40_s0.7"]
    assert equal["kv_tokens"] == 120 and equal["max_over_mean"] == 1.0
    assert abs(ragged["kv_tokens"] - 120) <= 3 and ragged["max_over_mean"] > 1.0
    assert equal["ms"] > 0 and ragged["ms"] > 0


def test_served_layout_keeps_shared_pages_and_reads_back():
    from engine.check import served_rows, step_layout

    # two decodes sharing pages 70 and 71, a third on its own; contexts as a step counts them
    decodes = [([70, 71, 5, 6], 60), ([70, 71, 9], 40), ([3, 4, 8, 2, 1], 70)]
    layout = step_layout(decodes, 16)
    assert layout["lens"] == [60, 40, 70] and layout["pages"] == 4 + 1 + 5
    assert layout["runs"] == [[[0, 4]], [[0, 2], [4, 1]], [[5, 5]]]
    assert served_rows(layout) == [[0, 1, 2, 3], [0, 1, 4], [5, 6, 7, 8, 9]]
    assert "ids" not in layout
    real = step_layout(decodes, 16, real_ids=True)
    assert real["runs"] == layout["runs"]
    assert served_rows(real, "ids") == [[70, 71, 5, 6], [70, 71, 9], [3, 4, 8, 2, 1]]


def test_served_batches_time_served_distinct_and_equal_layouts():
    from engine.check import decode_served, step_layout

    heads = attention_shard("llama-3-8b", 8)
    step = step_layout([([7, 8, 9], 40), ([7, 8, 3], 35), ([1], 9)], 16)
    out = decode_served(heads, "cpu", [step], pool_pages=64)
    assert len(out) == 1 and set(out[0]) == {"served_ms", "distinct_ms", "equal_ms"}
    assert all(ms > 0 for ms in out[0].values())
    with_ids = step_layout([([7, 8, 9], 40), ([7, 8, 3], 35), ([1], 9)], 16, real_ids=True)
    assert set(decode_served(heads, "cpu", [with_ids], pool_pages=64)[0]) == {
        "served_ms",
        "distinct_ms",
        "equal_ms",
        "served_ids_ms",
    }


def test_served_steps_run_whole_decode_steps_on_the_three_layouts():
    from engine.check import SHAPES, decode_step_served, step_layout
    from engine.weights import random_weights

    shape = SHAPES["tiny"]
    step = step_layout([([7, 8, 9], 40), ([7, 8, 3], 35), ([1], 9)], 16)
    w = random_weights(shape, 0, "cpu")
    out = decode_step_served(shape, w, "cpu", [step], pool_pages=32)
    assert len(out) == 1 and set(out[0]) == {"served_ms", "distinct_ms", "equal_ms"}
    assert all(ms > 0 for ms in out[0].values())


def test_served_variants_keep_sharing_distinct_pages_and_equal_lengths():
    import numpy as np

    from engine.check import _served_variants, step_layout

    decodes = [([7, 8, 9], 40), ([7, 8, 3], 35), ([1, 2], 20)]
    variants = {
        name: (table, lens)
        for name, table, lens in _served_variants(
            step_layout(decodes, 16, real_ids=True), np.random.default_rng(0), 64
        )
    }
    assert list(variants) == ["served", "distinct", "equal", "served_ids"]
    served, lens = variants["served"]
    assert lens.tolist() == [40, 35, 20]
    assert served[0, :2].tolist() == served[1, :2].tolist()  # the shared pages: one each
    assert len({served[0, 2], served[1, 2], *served[2, :2]} | set(served[0, :2])) == 6
    distinct, _ = variants["distinct"]
    used = [p for row, n in zip(distinct, [3, 3, 2], strict=True) for p in row[:n]]
    assert len(set(used)) == len(used) == 8  # every page of every decode its own
    equal, at = variants["equal"]
    assert at.tolist() == [32] * 3 and equal.shape[1] == 2  # mean 31.67 -> 32 tokens, 2 pages
    assert len(set(equal.ravel().tolist())) == 6
    ids, _ = variants["served_ids"]
    assert ids[:, :3].tolist() == [[7, 8, 9], [7, 8, 3], [1, 2, 0]]  # the pool's own pages


def test_fit_counts_shared_reads_as_the_simulator_does():
    import importlib.util
    from pathlib import Path
    from types import SimpleNamespace

    from sim.cascade import shared_reads

    path = Path(__file__).resolve().parents[2] / "engine" / "runs" / "fit_shared_reads.py"
    spec = importlib.util.spec_from_file_location("fit_shared_reads", path)
    assert spec is not None and spec.loader is not None
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    rows = [[5, 6, 7, 8], [5, 6, 7, 9], [5, 6, 11], [3, 4]]
    items = [(SimpleNamespace(pages=r), 1, False) for r in rows]
    assert fit.reread_tokens(rows) == shared_reads(items, 16) == (2 * 2) * 16


def test_prefill_batches_time_each_step_in_one_launch_and_each_chunk_alone():
    from engine.check import prefill_batches

    heads = attention_shard("llama-3-8b", 8)
    steps = [[[5, 20], [3, 0], [5, 20]], [[17, 40]]]
    out = prefill_batches(heads, "cpu", steps, pool_pages=64)
    assert [r["chunks"] for r in out] == steps
    assert [len(r["alone_ms"]) for r in out] == [3, 1]
    assert out[0]["alone_ms"][0] == out[0]["alone_ms"][2]  # a chunk shape is timed alone once
    assert all(r["batched_ms"] > 0 and min(r["alone_ms"]) > 0 for r in out)


def test_prefill_batch_layouts_are_the_committed_ones():
    """engine/runs/prefill_batches.py layouts rebuilds the layouts the device timed: the grid and
    the steps with a chunk the round-5 runs served."""
    import importlib.util
    import json
    from pathlib import Path

    runs = Path(__file__).resolve().parents[2] / "engine" / "runs"
    spec = importlib.util.spec_from_file_location("prefill_batches", runs / "prefill_batches.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.step_chunks("512@1664;2176@0") == [[512, 1664], [2176, 0]]
    timed = json.loads((runs / "logs/2026-11-30_prefill_batches/layouts.json").read_text())
    out = module.layouts()
    assert {k: v["steps"] for k, v in out.items()} == {k: v["steps"] for k, v in timed.items()}
