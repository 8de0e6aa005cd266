"""Prepared launches (prepare_decode / prepare_prefill + launch per layer) and kernels.launch.

A step prepares once and launches per layer over that layer's K/V pool views: every layer's
output must be the bits the one-shot wrapper gives for that layer (the same kernels, the same
arguments), and the float32 reference within tolerance. The direct launcher path of
kernels.launch is exercised with a stand-in compiled kernel (the interpreter has none): it must
hand the launcher every parameter in order with the swapped tensors, and fall back to the normal
path for misaligned tensors or when launch hooks are set.
"""

import pytest
import torch

import kernels.launch as launch_mod
from kernels.launch import BoundLaunch
from kernels.paged_decode import (
    FUSED_COMBINE_MAX_SPLITS,
    choose_split,
    decode_split_bound,
    decode_splits,
    paged_decode_attention,
    prepare_decode,
)
from kernels.paged_prefill import paged_prefill_attention, plan_prefill, prepare_prefill
from kernels.reference import (
    make_paged_kv,
    make_prefill_batch,
    paged_decode_reference,
    paged_prefill_reference,
)

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
HEAD_DIM = 128 if ON_GPU else 32
LAYERS = 3
TOL = 1e-2


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref).norm() / ref.norm())


def layer_pools(k_cache: torch.Tensor, g: torch.Generator):
    """LAYERS K and V views of one [LAYERS, ...] pool each (identical shapes and strides); the
    first layer holds the given cache."""
    shape = (LAYERS, *k_cache.shape)
    k = torch.randn(shape, generator=g, device=DEVICE).to(k_cache.dtype)
    v = torch.randn(shape, generator=g, device=DEVICE).to(k_cache.dtype)
    return [k[i] for i in range(LAYERS)], [v[i] for i in range(LAYERS)]


@pytest.mark.parametrize("num_splits", [1, 3])
def test_decode_layers_match_wrapper_and_reference(num_splits):
    g = torch.Generator(device=DEVICE).manual_seed(1)
    lens = [1, 17, 40, 70]
    kv = make_paged_kv(lens, 2, HEAD_DIM, 16, torch.bfloat16, DEVICE, g, spare_pages=2)
    ks, vs = layer_pools(kv.k_cache, g)
    q = torch.randn(len(lens), 8, HEAD_DIM, generator=g, device=DEVICE).to(torch.bfloat16)
    out = torch.full_like(q, float("nan"))
    kw = dict(num_splits=num_splits, max_seq_len=max(lens), block_n=16, check_bounds=False)
    prep = prepare_decode(q, ks[0], vs[0], kv.block_tables, kv.seq_lens, out=out, **kw)
    assert prep.num_splits == num_splits
    assert len(prep.launches) == (2 if num_splits > FUSED_COMBINE_MAX_SPLITS else 1)
    for i in range(LAYERS):
        out.fill_(float("nan"))
        assert prep.launch(ks[i], vs[i]) is out
        want = paged_decode_attention(q, ks[i], vs[i], kv.block_tables, kv.seq_lens, **kw)
        assert torch.equal(out, want), f"layer {i}: prepared launch differs from the wrapper"
        ref = paged_decode_reference(q, ks[i], vs[i], kv.block_tables, kv.seq_lens)
        assert rel_err(out, ref) < TOL


@pytest.mark.parametrize("tokens_per_split", [None, 16])
def test_prefill_layers_match_wrapper_and_reference(tokens_per_split):
    g = torch.Generator(device=DEVICE).manual_seed(2)
    ctx, new = [0, 33, 17], [5, 20, 1]
    q, kv, cu = make_prefill_batch(ctx, new, 2, 4, HEAD_DIM, 16, torch.bfloat16, DEVICE, g, 2)
    ks, vs = layer_pools(kv.k_cache, g)
    lens = [c + n for c, n in zip(ctx, new, strict=True)]
    plan = plan_prefill(new, lens, 2, 4, device=DEVICE, tokens_per_split=tokens_per_split)
    out = torch.full_like(q, float("nan"))
    prep = prepare_prefill(
        q, ks[0], vs[0], kv.block_tables, kv.seq_lens, cu, out=out, plan=plan, check_bounds=False
    )
    assert prep.plan is plan
    assert len(prep.launches) == (2 if plan.n_slots else 1)
    for i in range(LAYERS):
        out.fill_(float("nan"))
        prep(ks[i], vs[i])
        want = paged_prefill_attention(
            q, ks[i], vs[i], kv.block_tables, kv.seq_lens, cu, plan=plan, check_bounds=False
        )
        assert torch.equal(out, want), f"layer {i}: prepared launch differs from the wrapper"
        ref, _ = paged_prefill_reference(q, ks[i], vs[i], kv.block_tables, kv.seq_lens, cu)
        assert rel_err(out, ref) < TOL


def test_launch_with_other_q_and_out_views():
    g = torch.Generator(device=DEVICE).manual_seed(3)
    lens = [9, 33]
    kv = make_paged_kv(lens, 2, HEAD_DIM, 16, torch.bfloat16, DEVICE, g)
    q_all = torch.randn(2, len(lens), 8, HEAD_DIM, generator=g, device=DEVICE)
    q_all = q_all.to(torch.bfloat16)
    outs = torch.full_like(q_all, float("nan"))
    prep = prepare_decode(q_all[0], kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens,
                          out=outs[0])  # fmt: skip
    prep(kv.k_cache, kv.v_cache, q=q_all[1], out=outs[1])
    assert bool(torch.isfinite(outs[1]).all()) and bool(torch.isnan(outs[0]).all())
    want = paged_decode_attention(q_all[1], kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens)
    assert torch.equal(outs[1], want)


def test_launch_rejects_other_layouts():
    g = torch.Generator(device=DEVICE).manual_seed(4)
    kv = make_paged_kv([20], 2, HEAD_DIM, 16, torch.bfloat16, DEVICE, g, spare_pages=1)
    q = torch.randn(1, 8, HEAD_DIM, generator=g, device=DEVICE).to(torch.bfloat16)
    prep = prepare_decode(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens)
    with pytest.raises(ValueError, match="k_cache differs from the prepared one"):
        prep(kv.k_cache[:-1], kv.v_cache)
    with pytest.raises(ValueError, match="v_cache differs from the prepared one"):
        prep(kv.k_cache, kv.v_cache.float())
    with pytest.raises(ValueError, match="q differs from the prepared one"):
        prep(kv.k_cache, kv.v_cache, q=torch.cat([q, q], dim=2)[:, :, :HEAD_DIM])
    with pytest.raises(ValueError, match="out differs from the prepared one"):
        prep(kv.k_cache, kv.v_cache, out=torch.empty(1, 8, HEAD_DIM, device=DEVICE))


def test_empty_batches_launch_nothing():
    g = torch.Generator(device=DEVICE).manual_seed(5)
    kv = make_paged_kv([4], 2, HEAD_DIM, 16, torch.bfloat16, DEVICE, g)
    q = torch.empty(0, 8, HEAD_DIM, dtype=torch.bfloat16, device=DEVICE)
    prep = prepare_decode(q, kv.k_cache, kv.v_cache, kv.block_tables[:0], kv.seq_lens[:0])
    assert prep.launches == [] and prep(kv.k_cache, kv.v_cache).shape == (0, 8, HEAD_DIM)
    cu = torch.zeros(2, dtype=torch.int32, device=DEVICE)
    pre = prepare_prefill(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, cu)
    assert pre.launches == [] and pre(kv.k_cache, kv.v_cache).shape == (0, 8, HEAD_DIM)


# kernels.launch's direct path, with a stand-in compiled kernel.


def _kernel(a_ptr, b, c_ptr, n, BLOCK: int = 4, FLAG: bool = False):  # noqa: N803
    raise AssertionError("the stand-in is never called")


class FakeCompiled:
    function = "fn-handle"
    packed_metadata = ("meta",)

    def __init__(self):
        self.calls: list[tuple] = []

    def run(self, *args):
        self.calls.append(args)


class FakeKernel:
    arg_names = ["a_ptr", "b", "c_ptr", "n", "BLOCK", "FLAG"]
    fn = staticmethod(_kernel)

    def __init__(self):
        self.compiled = FakeCompiled()
        self.normal: list[tuple] = []

    def __getitem__(self, grid):
        def call(*args, **kwargs):
            self.normal.append((grid, args, kwargs))
            return self.compiled

        return call


class FakeDriver:
    def get_current_device(self):
        return 7

    def get_current_stream(self, device):
        return 1000 + device


class Ptr:
    def __init__(self, addr):
        self.addr = addr

    def data_ptr(self):
        return self.addr


@pytest.fixture
def fake_driver(monkeypatch):
    monkeypatch.setattr(launch_mod, "_driver", FakeDriver)
    monkeypatch.setattr(launch_mod, "_launch_hooks_set", lambda: False)


def test_direct_path_after_the_first_call(fake_driver):
    k = FakeKernel()
    a0, a1, a2, c0 = Ptr(256), Ptr(512), Ptr(1024), Ptr(4096)
    bl = BoundLaunch(k, (3, 2, 1), [a0, 1.5, c0, 10], {"BLOCK": 8, "num_warps": 4}, (0, -1, 2))
    bl(a0, None, c0)  # normal path, remembers the compiled kernel
    bl(a1, None, c0)  # sets the direct path up and takes it
    bl(a2, None, c0)
    assert len(k.normal) == 1 and k.normal[0][2] == {"BLOCK": 8, "num_warps": 4}
    assert bl.fast_launches == 2
    for call, a in zip(k.compiled.calls, (a1, a2), strict=True):
        # grid, stream of the current device, function, metadata, no hook arguments, then every
        # parameter in order (keywords and defaults included), the swapped ones replaced.
        assert call == (3, 2, 1, 1007, "fn-handle", ("meta",), None, None, None,
                        a, 1.5, c0, 10, 8, False)  # fmt: skip


def test_misaligned_tensor_takes_the_normal_path(fake_driver):
    k = FakeKernel()
    bl = BoundLaunch(k, (1, 1, 1), [Ptr(0), 0.0, Ptr(64), 1], {}, (0, -1, 2))
    bl(Ptr(0), None, Ptr(64))
    bl(Ptr(32), None, Ptr(64))
    bl(Ptr(8), None, Ptr(64))  # not 16-byte aligned: the compiled kernel assumed it was
    assert bl.fast_launches == 1 and len(k.normal) == 2
    assert k.normal[1][1][0].addr == 8


def test_unaligned_first_call_allows_any_alignment(fake_driver):
    k = FakeKernel()
    bl = BoundLaunch(k, (1, 1, 1), [Ptr(8), 0.0, Ptr(64), 1], {}, (0, -1, 2))
    bl(Ptr(8), None, Ptr(64))
    bl(Ptr(24), None, Ptr(64))
    bl(Ptr(32), None, Ptr(64))
    assert bl.fast_launches == 2 and len(k.normal) == 1


def test_hooks_or_no_compiled_kernel_keep_the_normal_path(monkeypatch):
    monkeypatch.setattr(launch_mod, "_driver", FakeDriver)
    monkeypatch.setattr(launch_mod, "_launch_hooks_set", lambda: True)
    k = FakeKernel()
    bl = BoundLaunch(k, (1, 1, 1), [Ptr(0), 0.0, Ptr(0), 1], {}, (0, -1, 2))
    for _ in range(3):
        bl(Ptr(0), None, Ptr(0))
    assert bl.fast_launches == 0 and len(k.normal) == 3

    monkeypatch.setattr(launch_mod, "_launch_hooks_set", lambda: False)
    k2 = FakeKernel()
    k2.compiled = None  # type: ignore[assignment]  # the interpreter returns no compiled kernel
    bl2 = BoundLaunch(k2, (1, 1, 1), [Ptr(0), 0.0, Ptr(0), 1], {}, (0, -1, 2))
    for _ in range(3):
        bl2(Ptr(0), None, Ptr(0))
    assert bl2.fast_launches == 0 and len(k2.normal) == 3


def test_empty_hook_chains_are_not_hooks():
    class Chain:  # Triton's HookChain: never None, empty by default
        def __init__(self, calls):
            self.calls = calls

    assert not launch_mod._hook_set(None) and not launch_mod._hook_set(Chain([]))
    assert launch_mod._hook_set(Chain([print])) and launch_mod._hook_set(print)


def test_interpreter_launches_take_the_normal_path():
    if ON_GPU:
        pytest.skip("the interpreter runs on CPU only")
    g = torch.Generator(device=DEVICE).manual_seed(6)
    kv = make_paged_kv([20, 5], 2, HEAD_DIM, 16, torch.bfloat16, DEVICE, g)
    q = torch.randn(2, 8, HEAD_DIM, generator=g, device=DEVICE).to(torch.bfloat16)
    prep = prepare_decode(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens)
    for _ in range(3):
        prep(kv.k_cache, kv.v_cache)
    assert prep.fast_launches == 0


def test_gpu_launches_take_the_direct_path():
    if not ON_GPU:
        pytest.skip("needs a GPU (the interpreter has no compiled kernel)")
    g = torch.Generator(device=DEVICE).manual_seed(7)
    kv = make_paged_kv([3000, 70], 2, HEAD_DIM, 16, torch.bfloat16, DEVICE, g)
    q = torch.randn(2, 8, HEAD_DIM, generator=g, device=DEVICE).to(torch.bfloat16)
    prep = prepare_decode(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, num_splits=4)
    first = prep(kv.k_cache, kv.v_cache).clone()
    for _ in range(3):
        assert torch.equal(prep(kv.k_cache, kv.v_cache), first)
    why = [launch.why_normal for launch in prep.launches]
    assert prep.fast_launches == len(prep.launches) * 3, why  # normal once, then direct


# Splits from device memory (decode graphs captured once per batch size).


@pytest.mark.parametrize("lens", [[1, 17, 40, 700], [300, 301], [5]])
def test_device_splits_equal_the_host_split_path(lens):
    g = torch.Generator(device=DEVICE).manual_seed(8)
    kv = make_paged_kv(lens, 2, HEAD_DIM, 16, torch.bfloat16, DEVICE, g, spare_pages=2)
    q = torch.randn(len(lens), 8, HEAD_DIM, generator=g, device=DEVICE).to(torch.bfloat16)
    split_t = torch.zeros(2, dtype=torch.int32, device=DEVICE)
    out = torch.full_like(q, float("nan"))
    bound = 8
    prep = prepare_decode(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, out=out,
                          split_tensor=split_t, max_splits=bound, block_n=16)  # fmt: skip
    assert prep.num_splits == bound
    assert len(prep.launches) == (1 if bound <= FUSED_COMBINE_MAX_SPLITS else 2)
    for n in (1, 2, 3, bound):  # the same prepared launch (one graph), other split counts
        want = paged_decode_attention(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens,
                                      num_splits=n, block_n=16)  # fmt: skip
        tps = -(-max(lens) // n)
        split_t.copy_(torch.tensor([-(-max(lens) // tps), tps], dtype=torch.int32))
        out.fill_(float("nan"))
        prep(kv.k_cache, kv.v_cache)
        assert torch.equal(out, want), f"{n} splits: device-split path differs"


def test_decode_splits_and_their_bound():
    for batch, total, longest in ((1, 131072, 131072), (16, 16 * 2048, 2048), (64, 70000, 9000)):
        n, tps = decode_splits(batch, total, longest, 8, "cpu")
        assert (n, tps) == choose_split(total, longest, 8, 132, 64, 16, 512, False, batch)
    for batch in (1, 3, 16, 64, 255):
        for max_len in (1, 700, 5000, 40000):
            bound = decode_split_bound(batch, max_len, 8, "cpu")
            # (batch 1: the bound of the 16-programs-per-SM rule, which bounds every batch size;
            # the launcher's single-sequence rule and wave_fit only split less)
            brute = max(
                choose_split(L + batch - 1, L, 8, 132, 64, 16, 512, False, max(batch, 2), 0.0)[0]
                for L in range(1, max_len + 1)
            )
            assert bound == brute, (batch, max_len)
            assert decode_splits(1, max_len, max_len, 8, "cpu")[0] <= bound
            # Any batch within the limits splits no more than the bound.
            for total in (max_len, max_len + batch - 1, batch * max_len):
                if total >= max_len + batch - 1:
                    assert decode_splits(batch, total, max_len, 8, "cpu")[0] <= bound


def test_decode_splits_one_wave_is_the_launchers_and_bounded():
    # With the host's lengths, decode_splits gives what prepare_decode picks, within the bound.
    lens = [2300, 4100, 3000, 2048, 8000, 512] * 3
    kw = dict(one_wave=4, lengths=lens, one_wave_slack=1.3)
    n, tps = decode_splits(len(lens), sum(lens), max(lens), 8, "cpu", **kw)
    assert (n, tps) == choose_split(sum(lens), max(lens), 8, 132, 64, batch=len(lens), **kw)
    assert n <= decode_split_bound(len(lens), max(lens), 8, "cpu")


def test_device_split_arguments_are_checked():
    g = torch.Generator(device=DEVICE).manual_seed(9)
    kv = make_paged_kv([20], 2, HEAD_DIM, 16, torch.bfloat16, DEVICE, g)
    q = torch.randn(1, 8, HEAD_DIM, generator=g, device=DEVICE).to(torch.bfloat16)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens)
    with pytest.raises(ValueError, match="split_tensor must be int32"):
        prepare_decode(*args, split_tensor=torch.zeros(2, device=DEVICE), max_splits=2)
    with pytest.raises(ValueError, match="needs max_splits"):
        prepare_decode(*args, split_tensor=torch.zeros(2, dtype=torch.int32, device=DEVICE))
