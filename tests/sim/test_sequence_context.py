"""A request's context (prompt + generated ids): built once, and the prompt's ids kept once."""

from __future__ import annotations

import numpy as np

from sim.kv.hashing import page_keys
from sim.request import Request
from sim.sequence import new_sequence


def test_the_prompt_and_its_keys_become_the_contexts_head_with_the_same_values():
    prompt = np.arange(37, dtype=np.int32) * 11
    req = Request(request_id=5, prompt=prompt.copy(), output_tokens=9)
    seq = new_sequence(req, page_size=4, hash_bits=64, now=0.0)
    keys = seq.keys  # hashed from the prompt before the context exists
    context, context_keys = seq.context_pages(4, 64)
    assert context.tolist() == prompt.tolist() + req.generated_ids().tolist()
    assert np.shares_memory(req.prompt, context) and req.prompt.tolist() == prompt.tolist()
    assert req.prompt.dtype == np.int32 and req.prompt_tokens == 37
    assert context_keys.tolist() == page_keys(context, 4, 64).tolist()
    assert context_keys[: keys.size].tolist() == keys.tolist()  # the prompt's keys lead
    assert np.shares_memory(seq.keys, context_keys) and seq.keys.tolist() == keys.tolist()
    assert seq.context_pages(4, 64)[0] is context  # built once


def test_keys_hashed_otherwise_are_left_as_they_are():
    req = Request(request_id=2, prompt=np.arange(20, dtype=np.int32), output_tokens=4)
    seq = new_sequence(req, page_size=4, hash_bits=64, now=0.0)
    keys = seq.keys
    _, context_keys = seq.context_pages(4, 16)  # other hash bits: other keys
    assert seq.keys is keys and not np.shares_memory(seq.keys, context_keys)
    assert seq.keys.tolist() == page_keys(np.arange(20, dtype=np.int32), 4, 64).tolist()
