"""Host time of a step's attention launches: the wrappers per layer vs one prepared launch per step.

A serving step runs attention once per layer between CUDA-graphed stretches, so the host time of
issuing it is paid L times a step. This measures, per step kind (decode-only, prefill-only,
mixed), the host microseconds per layer of

- `wrapper`: `paged_decode_attention` / `paged_prefill_attention` called per layer with the
  arguments the engine passes (host-known lengths, a prebuilt prefill plan, check_bounds=False);
- `prepared`: `prepare_decode` / `prepare_prefill` once per step (counted in), then
  `launch(k_i, v_i)` per layer.

On a GPU both run the real kernels (and the outputs of the two paths are compared bit for bit);
`--mock` (the default without a GPU) replaces the kernels by a stand-in that launches nothing, so
the numbers are the Python side alone (validation, workspaces, arguments; no Triton dispatch).

    python -m kernels.bench_launch [--layers 32] [--steps 50] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import numpy as np

# The llama-3-8b attention shape (the engine's model): 32 query heads, 8 KV heads, d 128.
SHAPE = {"num_q_heads": 32, "num_kv_heads": 8, "head_dim": 128, "page_size": 16}
STEP_KINDS = {
    # decode lengths, prefill chunks (new tokens, cached tokens before the chunk)
    "decode16": ([2048] * 16, []),
    "prefill200": ([], [(200, 2048)]),
    "mixed16+200": ([2048] * 16, [(200, 2048)]),
    "decode64": ([2048] * 64, []),
}


class _MockCompiled:
    function = 1
    packed_metadata = ()

    def run(self, *args: Any) -> None:
        return None


class _MockKernel:
    """Stands in for a Triton kernel: `kernel[grid](...)` launches nothing."""

    def __init__(self, real: Any) -> None:
        self.arg_names = real.arg_names
        self.fn = real.fn
        self._compiled = _MockCompiled()

    def __getitem__(self, grid: Any) -> Any:
        return lambda *args, **kwargs: self._compiled


class _MockDriver:
    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int) -> int:
        return 0


def _install_mock() -> None:
    import kernels.launch as launch_mod
    import kernels.paged_decode as dec
    import kernels.paged_prefill as pre

    for mod, names in (
        (dec, ("_paged_decode_kernel", "_combine_kernel")),
        (pre, ("_paged_prefill_kernel", "_prefill_combine_kernel")),
    ):
        for name in names:
            setattr(mod, name, _MockKernel(getattr(mod, name)))
    launch_mod._driver = _MockDriver
    launch_mod._launch_hooks_set = lambda: False


def build_step(kind: str, layers: int, device: str, seed: int = 0) -> dict[str, Any]:
    """Pools of `layers` layers (one K and one V view per layer, identical shapes and strides),
    the step's tables and its static q / out buffers (decode rows first, as the engine packs)."""
    import torch

    from kernels.paged_prefill import plan_prefill

    dec_lens, chunks = STEP_KINDS[kind]
    hq, hkv, d, ps = (SHAPE[k] for k in ("num_q_heads", "num_kv_heads", "head_dim", "page_size"))
    pre_lens = [n + c for n, c in chunks]
    lens = dec_lens + pre_lens
    pages_per = [-(-n // ps) for n in lens]
    total_pages = sum(pages_per) + 1
    g = torch.Generator(device="cpu").manual_seed(seed)
    perm = torch.randperm(total_pages, generator=g).to(torch.int32)
    gd = torch.Generator(device=device).manual_seed(seed)
    tables, at = [], 0
    width = max(pages_per)
    for n in pages_per:
        row = torch.zeros(width, dtype=torch.int32)
        row[:n] = perm[at : at + n]
        at += n
        tables.append(row)
    dtype = torch.bfloat16
    pool_shape = (layers, total_pages, hkv, ps, d)
    if device == "cpu":  # mocked: nothing reads the pool, keep it small
        pool_shape = (layers, 1, hkv, ps, d)
    k_pool = torch.randn(pool_shape, generator=gd, device=device, dtype=dtype)
    v_pool = torch.randn(pool_shape, generator=gd, device=device, dtype=dtype)
    nd, total_new = len(dec_lens), sum(n for n, _ in chunks)
    rows = nd + total_new
    q = torch.randn(rows, hq, d, generator=gd, device=device, dtype=dtype)
    out = torch.empty_like(q)
    step: dict[str, Any] = {
        "k": [k_pool[i] for i in range(layers)],
        "v": [v_pool[i] for i in range(layers)],
        "q": q,
        "out": out,
        "nd": nd,
        "rows": rows,
    }
    if nd:
        step["dec_tables"] = torch.stack(tables[:nd]).to(device)
        step["dec_lens"] = torch.tensor(dec_lens, dtype=torch.int32, device=device)
        step["dec_max"], step["dec_total"] = max(dec_lens), sum(dec_lens)
    if chunks:
        step["pre_tables"] = torch.stack(tables[nd:]).to(device)
        step["pre_lens"] = torch.tensor(pre_lens, dtype=torch.int32, device=device)
        cu = np.concatenate([[0], np.cumsum([n for n, _ in chunks])]).astype(np.int32)
        step["pre_cu"] = torch.tensor(cu, device=device)
        step["plan"] = plan_prefill([n for n, _ in chunks], pre_lens, hkv, hq // hkv, device=device)
    return step


def _dec_kwargs(step: dict[str, Any]) -> dict[str, Any]:
    return dict(max_seq_len=step["dec_max"], total_tokens=step["dec_total"], check_bounds=False)


def run_wrapper(step: dict[str, Any]) -> None:
    from kernels.paged_decode import paged_decode_attention
    from kernels.paged_prefill import paged_prefill_attention

    q, out, nd, rows = step["q"], step["out"], step["nd"], step["rows"]
    for k, v in zip(step["k"], step["v"], strict=True):
        if nd:
            paged_decode_attention(
                q[:nd], k, v, step["dec_tables"], step["dec_lens"], out=out[:nd],
                **_dec_kwargs(step),
            )  # fmt: skip
        if rows > nd:
            paged_prefill_attention(
                q[nd:rows], k, v, step["pre_tables"], step["pre_lens"], step["pre_cu"],
                out=out[nd:rows], plan=step["plan"], check_bounds=False,
            )  # fmt: skip


def run_prepared(step: dict[str, Any]) -> list[Any]:
    from kernels.paged_decode import PreparedAttention, prepare_decode
    from kernels.paged_prefill import prepare_prefill

    q, out, nd, rows = step["q"], step["out"], step["nd"], step["rows"]
    k0, v0 = step["k"][0], step["v"][0]
    launches: list[PreparedAttention] = []
    if nd:
        launches.append(
            prepare_decode(
                q[:nd],
                k0,
                v0,
                step["dec_tables"],
                step["dec_lens"],
                out=out[:nd],
                **_dec_kwargs(step),
            )  # fmt: skip
        )
    if rows > nd:
        launches.append(
            prepare_prefill(
                q[nd:rows],
                k0,
                v0,
                step["pre_tables"],
                step["pre_lens"],
                step["pre_cu"],
                out=out[nd:rows],
                plan=step["plan"],
                check_bounds=False,
            )  # fmt: skip
        )
    for k, v in zip(step["k"], step["v"], strict=True):
        for launch in launches:
            launch(k, v)
    return launches


def _host_us(fn: Any, step: dict[str, Any], steps: int, gpu: bool) -> list[float]:
    """Host microseconds per layer of each of `steps` runs (after 3 warm-up runs)."""
    import torch

    clock = time.perf_counter if gpu else time.thread_time
    layers = len(step["k"])
    per: list[float] = []
    for i in range(steps + 3):
        if gpu:
            torch.cuda.synchronize()
        t0 = clock()
        fn(step)
        t1 = clock()
        if i >= 3:
            per.append((t1 - t0) * 1e6 / layers)
    if gpu:
        torch.cuda.synchronize()
    return per


def _device_ms(fn: Any, step: dict[str, Any]) -> float:
    """Device time of one step's attention (all layers), median of events over 20 runs."""
    import torch

    times = []
    for _ in range(23):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(step)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return float(statistics.median(times[3:]))


def measure(layers: int, steps: int, mock: bool) -> list[dict[str, Any]]:
    import torch

    gpu = torch.cuda.is_available() and not mock
    if not gpu:
        _install_mock()
    device = "cuda" if gpu else "cpu"
    rows = []
    for kind in STEP_KINDS:
        step = build_step(kind, layers, device)
        row: dict[str, Any] = {"kind": kind, "layers": layers, "mode": "gpu" if gpu else "mock"}
        if gpu:  # the two paths give the same bits
            step["out"].fill_(float("nan"))
            run_wrapper(step)
            ref = step["out"].clone()
            step["out"].fill_(float("nan"))
            launches = run_prepared(step)
            row["bitwise_equal"] = bool(torch.equal(ref, step["out"]))
            row["fast_launches"] = sum(x.fast_launches for x in launches)
            row["why_normal"] = sorted({b.why_normal for x in launches for b in x.launches})
            row["kernel_launches_per_layer"] = sum(len(x.launches) for x in launches)
        for name, fn in (("wrapper", run_wrapper), ("prepared", run_prepared)):
            per = _host_us(fn, step, steps, gpu)
            row[f"{name}_us_per_layer"] = round(float(statistics.median(per)), 2)
            row[f"{name}_us_per_layer_p10_p90"] = [
                round(float(np.percentile(per, 10)), 2),
                round(float(np.percentile(per, 90)), 2),
            ]
            if gpu:
                row[f"{name}_device_ms_per_step"] = round(_device_ms(fn, step), 4)
        rows.append(row)
        del step
        if gpu:
            torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--mock", action="store_true", help="stand-in kernels (default on CPU)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = measure(args.layers, args.steps, args.mock)
    print(
        f"{'step':<14} {'mode':<5} {'wrapper us/layer':>17} {'prepared us/layer':>18} "
        f"{'x':>6} {'bits':>5}"
    )
    for r in rows:
        w, p = r["wrapper_us_per_layer"], r["prepared_us_per_layer"]
        print(
            f"{r['kind']:<14} {r['mode']:<5} {w:>17.1f} {p:>18.1f} {w / max(p, 1e-9):>6.2f} "
            f"{str(r.get('bitwise_equal', '-')):>5}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
