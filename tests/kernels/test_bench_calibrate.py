"""Host-side helpers of the bench and the calibration, and a CPU smoke run of calibrate_one."""

import pytest

from kernels.bench import kv_bytes, seed_mix_lengths
from kernels.calibrate import (
    SCHEMA,
    Grids,
    calibrate_one,
    fidelity_plans,
    fidelity_plans_extra,
    merge_tables,
    parse_targets,
    shard_shapes,
)
from sim.config import ModelConfig
from sim.latency.calibrated import SCHEMA as SIM_SCHEMA
from sim.latency.calibrated import expected_shapes, validate_table
from sim.presets import MODEL_PRESETS


def test_seed_mix_is_the_articles_load():
    lens = seed_mix_lengths()
    assert len(lens) == 100
    assert lens.count(32768) == 10
    assert all(512 <= n <= 8192 for n in lens if n != 32768)
    assert lens == seed_mix_lengths()  # seeded


def test_cascade_mix_is_the_seed_mix_with_80_sharing():
    from kernels.bench_prefill import SHARED_PREFIX, cascade_mix

    lens, sizes, prefixes = cascade_mix()
    assert len(lens) == 100 and sizes == [80] + [1] * 20 and prefixes == [2048] + [0] * 20
    assert all(n > SHARED_PREFIX for n in lens[:80])
    seed = seed_mix_lengths()
    assert lens[80:] == [n for i, n in enumerate(seed) if i % 5 == 4]
    assert lens[:80] == [max(n, 2049) for i, n in enumerate(seed) if i % 5 != 4]


def test_kv_bytes_formula():
    # One 32K request at the article's shape, one layer: 2 x 8 x 128 x 32768 x 2 B.
    assert kv_bytes([32768], 8, 128) == 2 * 8 * 128 * 32768 * 2


@pytest.mark.parametrize("name,tp", [("article-70b", 2), ("llama-3-8b", 1), ("llama-3-70b", 2)])
def test_shard_shapes_match_what_the_simulator_expects(name, tp):
    preset = MODEL_PRESETS[name]
    assert shard_shapes(preset, tp) == expected_shapes(ModelConfig(name=name, **preset), tp)


def test_article_shard_at_tp2():
    s = shard_shapes(MODEL_PRESETS["article-70b"], 2)
    assert (s["num_q_heads"], s["num_kv_heads"], s["intermediate_size"]) == (32, 4, 26624)


def test_schemas_agree():
    assert SCHEMA == SIM_SCHEMA


def test_parse_targets():
    assert parse_targets("article-70b:2, llama-3-8b:1") == [("article-70b", 2), ("llama-3-8b", 1)]
    for bad in ("article-70b", "x:0", ""):
        with pytest.raises(ValueError):
            parse_targets(bad)


def test_merge_keeps_other_tables():
    old = {
        "allreduce_nccl": [{"tp": 2}],
        "decode_shared_reads": {"rho": 0.7},
        "tables": [{"model": "a", "tp": 1, "v": 1}, {"model": "b", "tp": 2, "v": 1}],
    }
    new = merge_tables(old, [{"model": "b", "tp": 2, "v": 2}], {"device": "X"})
    assert new["schema"] == SCHEMA and new["device"] == "X"
    assert new["allreduce_nccl"] == [{"tp": 2}]
    assert new["decode_shared_reads"] == {"rho": 0.7}
    assert new["tables"] == [{"model": "a", "tp": 1, "v": 1}, {"model": "b", "tp": 2, "v": 2}]


def test_fidelity_plans_are_seeded_and_in_range():
    plans = fidelity_plans(30)
    assert plans == fidelity_plans(30)
    assert [bool(p["prefill_new"]) for p in plans[:3]] == [False, True, True]
    for p in plans:
        assert len(p["decode_ctx"]) <= 256 and all(128 <= c <= 32768 for c in p["decode_ctx"])
        assert all(16 <= n <= 4096 for n in p["prefill_new"])
        assert p["decode_ctx"] or p["prefill_new"]


def test_extra_fidelity_plans_are_prefix_hits_and_cascade_groups():
    plans = fidelity_plans_extra(12)
    assert plans == fidelity_plans_extra(12)
    for p in plans[0::2]:
        assert p["kind"] == "prefix_hit" and not p["cascade_groups"]
        assert all(1 <= n <= 512 for n in p["prefill_new"]) and p["prefill_new"]
        assert all(1024 <= c <= 32768 - 512 for c in p["prefill_ctx"])
    for p in plans[1::2]:
        assert p["kind"] == "cascade" and p["cascade_groups"]
        at = 0
        for size, prefix in p["cascade_groups"]:
            assert 2 <= size <= 64 and prefix % 16 == 0 and 16 <= prefix <= 8192
            assert all(c > prefix for c in p["decode_ctx"][at : at + size])
            at += size
        assert len(p["decode_ctx"]) <= 256


def test_calibrate_one_runs_end_to_end_on_cpu():
    # Tiny shapes and grids: every measured path (GEMMs, LM head, the Triton decode kernel under
    # the interpreter, causal SDPA with cached context, composite fidelity steps) runs once.
    preset = dict(
        num_layers=2,
        num_q_heads=8,
        num_kv_heads=2,
        head_dim=32,
        hidden_size=64,
        intermediate_size=128,
        vocab_size=100,
        dtype_bytes=2,
    )
    grids = Grids(
        gemm_tokens=(1, 8),
        lm_tokens=(1, 4),
        decode_batch=(1, 2),
        decode_context=(16, 48),
        prefill_new=(1, 32),
        prefill_context=(0, 32),
        cascade_group=(2, 3),
        cascade_prefix=(16, 32),
        fidelity_max_new=32,
        fidelity_max_chunk_ctx=32,
    )
    small = {"block_m": 16, "block_n": 16, "num_warps": 4, "num_stages": 1}
    table, records = calibrate_one(
        "tiny",
        2,
        3,
        {"block_n": 16},
        lambda m: None,
        preset=preset,
        grids=grids,
        prefill_cfg=small,
        cascade_cfg=small,
        fidelity_extra=2,
    )
    validate_table(table)
    assert table["shapes"]["num_q_heads"] == 4 and table["shapes"]["num_kv_heads"] == 1
    assert len(table["decode_attn"]["ms"]) == 2 and len(table["prefill_attn"]["ms"][0]) == 2
    assert table["table_version"] == 2 and "paged_prefill" in table["prefill_attn"]["source"]
    assert len(table["cascade_prefix_attn"]["ms"]) == 2
    assert len(records) == 5 and all(r["measured_s"] > 0 for r in records)
    assert [r.get("kind") for r in records[3:]] == ["prefix_hit", "cascade"]
    assert records[4]["cascade_groups"]

    # Re-measure only the attention parts of a version-1 table: the GEMM tables are kept and
    # the old (SDPA) prefill table moves to prefill_attn_sdpa.
    old = {**table, "table_version": 1, "gemm": {"tokens": [1, 8], "ms": [9.0, 9.5]}}
    del old["cascade_prefix_attn"]
    new, _ = calibrate_one(
        "tiny",
        2,
        0,
        {"block_n": 16},
        lambda m: None,
        preset=preset,
        grids=grids,
        parts_to_measure=("prefill", "cascade"),
        old_table=old,
        prefill_cfg=small,
        cascade_cfg=small,
    )
    validate_table(new)
    assert new["gemm"] == old["gemm"] and new["decode_attn"] == old["decode_attn"]
    assert new["prefill_attn_sdpa"] == old["prefill_attn"]
    assert "cascade_prefix_attn" in new
    with pytest.raises(ValueError, match="no earlier table"):
        calibrate_one(
            "tiny", 2, 0, {}, None, preset=preset, grids=grids, parts_to_measure=("gemm",)
        )


def test_decode_sweep_times_the_prepared_launch_too():
    # CPU smoke run of the bench's decode sweep (wall time there): the prepared launch (its
    # kernels alone, as each layer of the engine's step issues them) is checked against the
    # reference after its timed calls, like the per-call launch.
    from kernels.bench import decode_sweep

    configs = [{}, {"_prepared": True}, {"deferred_row_sum": True, "_prepared": True, "_rep": 2}]
    rows = decode_sweep(configs, 1.0, lambda msg: None, shapes=["2x100"])
    assert [r["config"] for r in rows] == configs
    assert all(r["rel_err"] < 1e-2 and r["ms"] > 0 for r in rows)


def test_attention_parts_are_prepared_once_and_launched_per_layer(monkeypatch):
    # Session 11: the calibration times the decode and prefill launches as the engine issues
    # them in every layer of a step, prepared once (a split decode launch's counter zeroing is
    # the step's, not the layer's); the launches still give the reference's answer.
    import torch

    import kernels.paged_decode as dec
    import kernels.paged_prefill as pre
    from kernels.calibrate import LayerParts

    shapes = dict(num_q_heads=8, num_kv_heads=2, head_dim=32, hidden_size=64, intermediate_size=128)
    shapes["vocab_size"] = 100
    parts = LayerParts(shapes, 8, 512, {"block_n": 16, "num_splits": 3})
    prepared: list[object] = []
    for mod, name in ((dec, "prepare_decode"), (pre, "prepare_prefill")):
        real = getattr(mod, name)

        def counting(*args, real=real, **kw):
            launch = real(*args, **kw)
            prepared.append(launch)
            return launch

        monkeypatch.setattr(mod, name, counting)
    small = {"block_n": 16, "num_warps": 4, "num_stages": 1}
    parts.prefill_cfg = {**parts.prefill_cfg, "block_m": 16, **small}
    for make in (lambda: parts.decode([40, 7]), lambda: parts.prefill(5, 30)):
        run = make()
        assert len(prepared) == 1
        launch = prepared.pop()
        for _ in range(2):
            launch.out.fill_(float("nan"))
            run()
            assert bool(torch.isfinite(launch.out).all())
        assert not prepared


def test_small_chunk_suite_times_each_prepared_variant():
    # CPU smoke run of `kernels.bench_prefill --suite small` (wall time there): 3 new tokens over
    # 600 cached ones split into 3 key splits; each variant of the split combine is checked
    # against the reference before it is timed, in two passes.
    from kernels.bench_prefill import small_chunk_rows

    shape = dict(num_q_heads=8, num_kv_heads=2, head_dim=32)
    variants = [
        {},
        {"combine_rows": 2, "combine_splits": 16, "pdl_combine": True},
        {"pad_min_rows": 0, "_gluon": {"WS_SKIP_IDLE": 0}},  # plan knobs; Gluon's module knobs
        {"combine_rows": 3},  # not a power of two: logged and left out
    ]
    logged: list[str] = []
    rows = small_chunk_rows([(600, 3)], variants, logged.append, shape=shape)
    assert [r["knobs"] for r in rows] == variants[:3]
    assert [(r["work_class"], r["block_m"], r["max_splits"]) for r in rows] == [
        ("split", 128, 3),
        ("split", 128, 3),
        ("split_small", 16, 3),
    ]
    assert all(r["launches"] == 2 for r in rows)
    assert all(r["ms"] > 0 and len(r["ms_passes"]) == 2 and r["x_roofline"] > 0 for r in rows)
    assert "FAILED ValueError" in logged[0] and len(logged) == 2
    from kernels import gluon_prefill

    assert gluon_prefill.WS_SKIP_IDLE == 1  # restored after the variant was prepared


def test_small_chunk_suite_stops_on_a_wrong_output(monkeypatch):
    """A variant that runs but whose output is off is not logged and skipped like one that
    fails to compile: the suite stops."""
    import pytest

    from kernels import bench_prefill

    monkeypatch.setattr(bench_prefill, "check_prefill", lambda *a: 0.5)
    shape = dict(num_q_heads=8, num_kv_heads=2, head_dim=32)
    logged: list[str] = []
    with pytest.raises(bench_prefill.WrongPrefillOutput, match="rel err 0.5"):
        bench_prefill.small_chunk_rows([(600, 3)], [{}], logged.append, shape=shape)
    assert logged == []
