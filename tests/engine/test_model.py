"""The paged engine's logits against a plain-torch forward of the same weights (no paging, no
cache): chunked prefill then decodes, a prefix hit on pages another request wrote, and a mixed
batch. On CPU the kernels run under Triton's interpreter with a tiny model; pools are NaN-poisoned,
so a read of a slot nothing wrote reaches the logits.
"""

import numpy as np
import pytest
import torch

from engine import attention
from engine.batch import SeqWork
from engine.kv_pool import KVPool
from engine.model import PagedModel, greedy
from engine.reference import reference_logits
from engine.shape import TINY
from engine.weights import random_weights

PAGE = 16
TOL = 3e-2  # relative L2 error of a logits row, bf16 activations
BACKENDS = ["torch"] + (["triton"] if attention.PREFILL_BACKEND == "triton" else [])


@pytest.fixture(scope="module")
def weights():
    return random_weights(TINY, seed=3, device="cpu")


@pytest.fixture(params=BACKENDS)
def model(request, weights, monkeypatch):
    if request.param == "torch":
        monkeypatch.setattr("engine.model.prepare_prefill", attention.prepare_prefill_torch)
    pool = KVPool(TINY.num_layers, 24, TINY.num_kv_heads, PAGE, TINY.head_dim, "cpu", poison=True)
    return PagedModel(TINY, weights, pool)


def tokens(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, TINY.vocab_size, n)


def assert_close(row: torch.Tensor, ref: torch.Tensor) -> None:
    err = float((row.float() - ref.float()).norm() / ref.float().norm())
    assert err < TOL, f"rel err {err:.3g}"


def run_prompt(model, prompt, pages, chunks, context=0) -> torch.Tensor:
    """Prefill prompt[context:] in chunks of the given sizes; the last chunk's logits row."""
    at = context
    for n in chunks:
        logits = model.forward(model.prepare([SeqWork(prompt[at : at + n], at, pages, True)]))
        at += n
    assert at == len(prompt)
    return logits[0]


def test_chunked_prefill_then_decode_matches_reference(model, weights):
    prompt = tokens(0, 40)
    pages = [7, 3, 12]  # shuffled page ids, as sim's pool hands them out
    rows = [run_prompt(model, prompt, pages, [16, 13, 11])]
    seq = list(prompt)
    for _ in range(4):
        seq.append(int(greedy(rows[-1][None])[0]))
        step = model.prepare([SeqWork(np.array(seq[-1:]), len(seq) - 1, pages, False)])
        rows.append(model.forward(step)[0])
    ref = reference_logits(TINY, weights, torch.tensor(seq))
    for i, row in enumerate(rows):
        assert_close(row, ref[len(prompt) - 1 + i])


def test_prefix_hit_reads_pages_another_request_wrote(model, weights):
    a = tokens(1, 48)
    b = np.concatenate([a[:32], tokens(2, 21)])  # shares a's first two pages
    run_prompt(model, a, [5, 9, 2], [48])
    hit = run_prompt(model, b, [5, 9, 11, 4], [21], context=32)  # pages 5, 9 come from a
    scratch = run_prompt(model, b, [1, 3, 6, 8], [32, 21])
    assert_close(hit, scratch)
    assert_close(hit, reference_logits(TINY, weights, torch.tensor(b))[-1])


def test_mixed_batch_matches_reference(model, weights):
    p1, p2, p3, p4 = tokens(3, 20), tokens(4, 35), tokens(5, 40), tokens(6, 9)
    run_prompt(model, p1[:-1], [0, 1], [19])  # decodes of p1 and p2 come next
    run_prompt(model, p2[:-1], [2, 3, 4], [34])
    run_prompt(model, p3[:17], [5, 6, 7], [17])  # p3 resumes at 17 with a chunk of 23
    works = [
        SeqWork(p3[17:], 17, [5, 6, 7], True),
        SeqWork(p1[-1:], 19, [0, 1], False),
        SeqWork(p4, 0, [8], True),
        SeqWork(p2[-1:], 34, [2, 3, 4], False),
    ]
    logits = model.forward(model.prepare(works))
    for row, p in zip(logits, (p3, p1, p4, p2), strict=True):
        assert_close(row, reference_logits(TINY, weights, torch.tensor(p))[-1])


def test_weights_are_the_same_under_tensor_parallel_slicing():
    full = random_weights(TINY, seed=5, device="cpu")
    r0, r1 = (random_weights(TINY, seed=5, device="cpu", rank=r, tp=2) for r in (0, 1))
    d = TINY.head_dim
    q0 = TINY.num_q_heads // 2 * d
    assert torch.equal(full.layers[1].wqkv[:q0], r0.layers[1].wqkv[:q0])
    assert torch.equal(full.layers[1].w_down[:, TINY.intermediate_size // 2 :], r1.layers[1].w_down)
    assert torch.equal(torch.cat([r0.lm_head, r1.lm_head]), full.lm_head)


@pytest.mark.parametrize("forced_splits", [None, 2, 3])
def test_decode_graph_inputs_match_the_eager_step(model, weights, forced_splits, monkeypatch):
    """DecodeGraphs' static buffers (padded batch, scratch page, the split read from device
    memory under a split cap) give the eager step's logits; on CPU nothing is captured, the
    same static inputs run eagerly. These contexts get one split from the heuristic, so the
    split is also forced to 2 and 3 (cap 2 and 4: the grid's extra programs exit)."""
    import engine.graphs
    from engine.graphs import DecodeGraphs

    if forced_splits is not None:
        k = forced_splits
        monkeypatch.setattr(
            engine.graphs, "decode_splits", lambda n, total, longest, *a: (k, -(-longest // k))
        )

    prompts = [tokens(10 + i, n) for i, n in enumerate((20, 33, 5))]
    tables = [[0, 1], [2, 3, 4], [5]]
    for p, t in zip(prompts, tables, strict=True):
        run_prompt(model, p[:-1], t, [len(p) - 1])
    works = [SeqWork(p[-1:], len(p) - 1, t, False) for p, t in zip(prompts, tables, strict=True)]
    graphs = DecodeGraphs(model, max_model_len=128, scratch_page=23)
    if forced_splits is not None:  # the heuristic's bound at these lengths is 1 split
        assert graphs.split_caps == (1,)
        graphs.split_caps = (1, 2, 4)
    padded = graphs.run(works)  # 3 rows padded to 4
    assert graphs.splits.tolist()[0] == (forced_splits or 1)
    for row, p in zip(padded, prompts, strict=True):
        assert_close(row, reference_logits(TINY, weights, torch.tensor(p))[-1])
    # and the eager step with the same split chosen on the host gives the same logits
    step = model.prepare(works)
    step.decode_num_splits = forced_splits
    eager = model.forward(step)
    torch.testing.assert_close(padded.float(), eager.float(), rtol=0, atol=1e-2)


def test_piecewise_mixed_step_matches_reference(model, weights):
    """MixedGraphs' segments on static buffers (padded token count, scratch-page K/V for the
    padding) give the reference logits; on CPU nothing is captured, the segments run eagerly.
    The padding rows write only the scratch page: the next step, reading the real pages, still
    matches the reference."""
    from engine.piecewise import MixedGraphs

    p1, p2, p3 = tokens(20, 30), tokens(21, 19), tokens(22, 26)
    run_prompt(model, p1[:-1], [0, 1], [29])
    mixed = MixedGraphs(model, scratch_page=23, buckets=(8, 16, 64))
    works = [
        SeqWork(p2, 0, [2, 3], True),  # 19 new tokens
        SeqWork(p1[-1:], 29, [0, 1], False),
        SeqWork(p3[:12], 0, [4, 5], True),
    ]
    step = model.prepare(works)
    assert mixed.bucket_for(step.num_tokens) == 64  # 32 tokens padded to 64
    logits = mixed.run(step)
    for row, p in zip(logits, (p2, p1, p3[:12]), strict=True):
        assert_close(row, reference_logits(TINY, weights, torch.tensor(p))[-1])
    rest = model.prepare([SeqWork(p3[12:], 12, [4, 5], True)])  # 14 tokens, padded to 16
    assert_close(mixed.run(rest)[0], reference_logits(TINY, weights, torch.tensor(p3))[-1])
    assert mixed.bucket_for(65) is None


def test_fused_elementwise_kernels_give_the_torch_path_logits(weights, monkeypatch):
    """engine.layers.USE_FUSED = True runs kernels/fused.py (interpreter) for the norms, rotary +
    KV write and silu * up: a chunked prefill, a decode and a piecewise mixed step give the
    logits of the torch path (the kernels round as torch does, <= 1 bf16 ulp per element)."""
    from engine import layers
    from engine.piecewise import MixedGraphs

    def serve(fused: bool) -> list[torch.Tensor]:
        monkeypatch.setattr(layers, "USE_FUSED", fused)
        pool = KVPool(
            TINY.num_layers, 24, TINY.num_kv_heads, PAGE, TINY.head_dim, "cpu", poison=True
        )
        model = PagedModel(TINY, weights, pool)
        p1, p2 = tokens(30, 27), tokens(31, 9)
        rows = [run_prompt(model, p1[:-1], [4, 9], [16, 10])]
        step = model.prepare([SeqWork(p1[-1:], 26, [4, 9], False), SeqWork(p2, 0, [2], True)])
        rows += list(MixedGraphs(model, scratch_page=23, buckets=(16,)).run(step))
        return rows

    for fused, plain in zip(serve(True), serve(False), strict=True):
        assert_close(fused, plain)
        assert int(fused.argmax()) == int(plain.argmax())


def test_the_check_gate_stops_on_nan_graph_logits():
    """engine/runs/device_run.sh serves only after engine.check_gate passes; the first H200
    call of round 3 recorded NaN graph logits (a freed workspace) and served anyway."""
    import json
    from pathlib import Path

    from engine.check_gate import bad

    logs = Path(__file__).resolve().parents[2] / "engine" / "runs" / "logs" / "2026-11-30_run3"
    broken = json.loads((logs / "check_llama3_8b_call1_workspace_bug.json").read_text())
    fixed = json.loads((logs / "check_llama3_8b.json").read_text())
    assert bad(broken) == ["decode_graphs.b64.rel_err=nan"]
    assert bad(fixed) == []
