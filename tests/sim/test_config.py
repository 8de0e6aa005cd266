"""Config: the article's KV bill, presets, validation errors as one line."""

from __future__ import annotations

import pytest

from sim.config import ConfigError, parse_config


def test_bytes_per_token_is_the_articles_formula():
    cfg = parse_config({})
    m = cfg.model
    assert (m.num_layers, m.num_kv_heads, m.head_dim, m.dtype_bytes) == (48, 8, 128, 2)
    assert m.kv_bytes_per_token == 2 * 48 * 8 * 128 * 2 == 196608
    # The article: one 32K-token request is about 6.4 GB of KV.
    assert m.kv_bytes_per_token * 32768 == 6_442_450_944


def test_article_model_is_70b_class_and_fits_two_h200_with_tp2():
    cfg = parse_config({})
    assert 69e9 < cfg.model.num_params < 73e9
    # 2 x 141 GB x 0.9 minus ~144 GB of bf16 weights leaves ~110 GB of KV per node.
    assert 105e9 < cfg.kv_capacity_bytes < 115e9


def test_llama_presets_have_their_published_shapes():
    m8 = parse_config({"model": "llama-3-8b"}).model
    m70 = parse_config({"model": "llama-3-70b"}).model
    assert (m8.num_layers, m8.num_kv_heads, m8.hidden_size) == (32, 8, 4096)
    assert (m70.num_layers, m70.num_kv_heads, m70.hidden_size) == (80, 8, 8192)
    assert 7.9e9 < m8.num_params < 8.2e9 and 69e9 < m70.num_params < 72e9


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"bogus": 1}, "bogus"),
        ({"duration_s": "long"}, "duration_s"),
        ({"duration_s": -5}, "duration_s"),
        ({"cache": {"page_size": 24}}, "cache.page_size"),
        ({"model": "gpt-9"}, "model"),
        ({"node": {"num_gpus": 2, "tp": 4}}, "node"),
        ({"node": {"num_gpus": 4, "tp": 2}}, "node"),
        ({"cluster": {"num_nodes": 0}}, "cluster.num_nodes"),
        ({"cache": {"mechanism": "magic"}}, "cache.mechanism"),
    ],
)
def test_bad_config_names_the_field(data, field):
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(f"config: {field}:"), line


def test_page_bytes_must_be_a_multiple_of_256():
    # 1 token x 1 KV head x 64 dims x 2 bytes = 128 bytes per page per layer: rejected.
    model = {"preset": "llama-3-8b", "num_kv_heads": 1, "num_q_heads": 1, "head_dim": 64}
    with pytest.raises(ConfigError, match="not a multiple of 256"):
        parse_config({"model": model, "cache": {"page_size": 1}, "node": {"num_gpus": 1, "tp": 1}})
    parse_config({"model": model, "cache": {"page_size": 2}, "node": {"num_gpus": 1, "tp": 1}})


def test_reader_race_window_is_for_local_pages_only():
    with pytest.raises(
        ConfigError, match=r"^config: cache.race_window_s > 0 needs placement.policy: local_only$"
    ):
        parse_config({"cache": {"race_window_s": 0.02}, "placement": {"policy": "spill"}})
