"""Latency model calibrated on a real GPU: prices a step by interpolating measured tables.

`kvsched calibrate` (kernels/calibrate.py) writes `kernels/calibration/<gpu>.json`: for each
(model preset, tensor-parallel degree) it measured, per layer and per GPU shard,
  gemm          the four linear layers (QKV, O, gate+up, down) by tokens in the step
  lm_head       the vocabulary projection by logit rows
  decode_attn   our Triton paged decode kernel (page 16) by batch x context per request
  prefill_attn  causal attention of one chunk by new tokens x tokens already in KV
A step costs
  layers x (gemm(T) + decode_attn(B, mean ctx) + sum over chunks prefill_attn(n, c)
            + all-reduce) + lm_head(B + chunks)
with T = new prefill tokens + B. `prefill_attn` is timed from our paged prefill kernel (table
version 2; version 1 files timed SDPA), one chunk per launch; with `gpu.prefill_batch:
measured` a step's chunks are priced as the one launch the engine runs them in
(sim/latency/prefill_batch.py: the file's `prefill_batches` model, never below the costliest
chunk's table time). The tensor-parallel all-reduce comes from the file's `allreduce_nccl`
section (two bf16 all-reduces of T x hidden per layer, measured through NCCL on two H200s) when
it has one for this tp and hidden size; otherwise it keeps the roofline's term
(`RooflineLatency.allreduce_s`), and the breakdown names which (`allreduce_nccl_s` or
`allreduce_roofline_s`).

Interpolation is piecewise linear on each grid axis (bilinear on the 2-D tables). Bilinear
interpolation reproduces a term in batch x context exactly, which is how memory-bound decode
time grows. Past the last grid point the last segment is extended (time keeps growing linearly
in tokens, batch or context); below the first point the first value is kept (a launch floor).
"""

from __future__ import annotations

import bisect
import functools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from sim.config import ConfigError
from sim.latency.base import StepShape
from sim.latency.prefill_batch import COEFFICIENTS, PrefillBatch, pow2
from sim.latency.ragged import RaggedDecode
from sim.latency.roofline import RooflineLatency
from sim.latency.shared_reads import SharedReads

SCHEMA = "kvsched-calibration/1"
_REQUIRED_TOP = ("schema", "device", "torch", "triton", "date", "tables")
_TABLE_1D = {"gemm": "tokens", "lm_head": "tokens"}
_TABLE_2D = {"decode_attn": ("batch", "context"), "prefill_attn": ("new_tokens", "context")}
# The priced terms of a step, seconds over all layers; the all-reduce is the roofline's (not
# measurable on one GPU).
# The all-reduce is "allreduce_nccl_s" when measured (see CalibratedLatency.terms).
TERMS = ("gemm_s", "decode_attn_s", "prefill_attn_s", "lm_head_s", "allreduce_roofline_s")


class CalibrationError(ConfigError):
    """The calibration file is missing, malformed, or does not describe this model."""


def _axis(values: Any, where: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size < 2:
        raise CalibrationError(f"{where}: a grid axis needs >= 2 points, got {values!r}")
    if not np.all(np.diff(arr) > 0):
        raise CalibrationError(f"{where}: grid axis must increase strictly, got {arr.tolist()}")
    return arr


def _times(values: Any, shape: tuple[int, ...], where: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.shape != shape:
        raise CalibrationError(f"{where}: expected {shape} times, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or not np.all(arr > 0):
        raise CalibrationError(f"{where}: times must be finite and > 0")
    return arr


def validate_table(table: dict, where: str = "table") -> None:
    """Raise CalibrationError unless `table` holds every grid and time array, well formed."""
    for key in ("model", "tp", "shapes", *_TABLE_1D, *_TABLE_2D):
        if key not in table:
            raise CalibrationError(f"{where}: missing key {key!r}")
    for key, axis in _TABLE_1D.items():
        xs = _axis(table[key].get(axis), f"{where}.{key}.{axis}")
        _times(table[key].get("ms"), xs.shape, f"{where}.{key}.ms")
    for key, (ax0, ax1) in _TABLE_2D.items():
        xs = _axis(table[key].get(ax0), f"{where}.{key}.{ax0}")
        ys = _axis(table[key].get(ax1), f"{where}.{key}.{ax1}")
        _times(table[key].get("ms"), (xs.size, ys.size), f"{where}.{key}.ms")


def load_calibration(path: str | Path) -> dict:
    """Read and validate a calibration JSON file; raises CalibrationError with the reason."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise CalibrationError(f"no calibration file at {path}") from exc
    except json.JSONDecodeError as exc:
        raise CalibrationError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise CalibrationError(f"{path}: top level must be an object")
    for key in _REQUIRED_TOP:
        if key not in data:
            raise CalibrationError(f"{path}: missing key {key!r}")
    if data["schema"] != SCHEMA:
        raise CalibrationError(f"{path}: schema {data['schema']!r}, expected {SCHEMA!r}")
    if not isinstance(data["tables"], list) or not data["tables"]:
        raise CalibrationError(f"{path}: 'tables' must be a non-empty list")
    for i, table in enumerate(data["tables"]):
        validate_table(table, f"{path.name}.tables[{i}]")
    return data


def expected_shapes(model: Any, tp: int) -> dict[str, int]:
    """Per-GPU shard shapes a table must have been measured with (tensor parallel over heads)."""
    return {
        "num_q_heads": model.num_q_heads // tp,
        "num_kv_heads": max(1, model.num_kv_heads // tp),
        "head_dim": model.head_dim,
        "hidden_size": model.hidden_size,
        "intermediate_size": model.intermediate_size // tp,
        "vocab_size": -(-model.vocab_size // tp),
    }


def find_table(data: dict, model: Any, tp: int) -> dict | None:
    """The table measured for this model preset and TP degree with matching shapes, or None."""
    want = expected_shapes(model, tp)
    for table in data["tables"]:
        if table["model"] != model.name or int(table["tp"]) != tp:
            continue
        shapes = table["shapes"]
        if all(int(shapes.get(k, -1)) == v for k, v in want.items()):
            return table
    return None


def _weights(x: float, xs) -> tuple[int, float]:
    """Segment index i and position t on it: value = (1 - t) y[i] + t y[i + 1].

    t is clamped at 0 below the grid (keep the first value) and free above it (extend the last
    segment), so larger steps keep getting slower. `xs` is a list (the hot path: no numpy per
    step) or an array; both give the same float64 arithmetic.
    """
    if x <= xs[0]:
        return 0, 0.0
    i = min(bisect.bisect_right(xs, x) - 1, len(xs) - 2)
    return i, (x - xs[i]) / (xs[i + 1] - xs[i])


def interp1(x: float, xs, ys) -> float:
    i, t = _weights(x, xs)
    return float((1 - t) * ys[i] + t * ys[i + 1])


def interp2(x: float, y: float, xs, ys, zs) -> float:
    """Bilinear; `zs` indexed zs[i][j] (a list of rows, or a 2-D array)."""
    i, t = _weights(x, xs)
    j, u = _weights(y, ys)
    z0, z1 = zs[i], zs[i + 1]
    return float(
        (1 - t) * (1 - u) * z0[j]
        + t * (1 - u) * z1[j]
        + (1 - t) * u * z0[j + 1]
        + t * u * z1[j + 1]
    )


class _Grid1:
    """A 1-D table as Python floats, memoised by x (token counts repeat from step to step)."""

    __slots__ = ("xs", "ms", "_memo")

    def __init__(self, xs: Any, ms: Any):
        self.xs, self.ms = [float(v) for v in xs], [float(v) for v in ms]
        self._memo: dict[float, float] = {}

    def __call__(self, x: float) -> float:
        v = self._memo.get(x)
        if v is None:
            v = self._memo[x] = interp1(x, self.xs, self.ms)
        return v


class _Grid2:
    __slots__ = ("xs", "ys", "ms", "_ya", "_ma")

    def __init__(self, xs: Any, ys: Any, ms: Any):
        self.xs, self.ys = [float(v) for v in xs], [float(v) for v in ys]
        self.ms = [[float(v) for v in row] for row in ms]
        # The same floats as arrays, for `many` (built once: it runs once per decode span).
        self._ya, self._ma = np.asarray(self.ys), np.asarray(self.ms)

    def __call__(self, x: float, y: float) -> float:
        """interp2 inlined (one call per step and chunk): the same operations, the same float."""
        xs, ys = self.xs, self.ys
        if x <= xs[0]:
            i, t = 0, 0.0
        else:
            i = min(bisect.bisect_right(xs, x) - 1, len(xs) - 2)
            t = (x - xs[i]) / (xs[i + 1] - xs[i])
        if y <= ys[0]:
            j, u = 0, 0.0
        else:
            j = min(bisect.bisect_right(ys, y) - 1, len(ys) - 2)
            u = (y - ys[j]) / (ys[j + 1] - ys[j])
        z0, z1 = self.ms[i], self.ms[i + 1]
        return (
            (1 - t) * (1 - u) * z0[j]
            + t * (1 - u) * z1[j]
            + (1 - t) * u * z0[j + 1]
            + t * u * z1[j + 1]
        )

    def many(self, x: float, y: np.ndarray) -> np.ndarray:
        """`self(x, v)` for every v in y (float64), elementwise the same operations."""
        ya = self._ya
        i, t = _weights(x, self.xs)
        j = np.minimum(np.searchsorted(ya, y, side="right") - 1, ya.size - 2)
        below = y <= ya[0]
        if below.any():  # else j >= 0 already and u is the plain formula
            j = np.where(below, 0, j)
            u = np.where(below, 0.0, (y - ya[j]) / (ya[j + 1] - ya[j]))
        else:
            u = (y - ya[j]) / (ya[j + 1] - ya[j])
        z0, z1 = self._ma[i], self._ma[i + 1]
        return (
            (1 - t) * (1 - u) * z0[j]
            + t * (1 - u) * z1[j]
            + (1 - t) * u * z0[j + 1]
            + t * u * z1[j + 1]
        )


class CalibratedLatency:
    """Step time from the measured tables of one (model, tp); see the module docstring."""

    def __init__(
        self,
        model: Any,
        gpu: Any,
        tp: int,
        table: dict,
        allreduce: dict | None = None,
        shared_reads: SharedReads | None = None,
        ragged: RaggedDecode | None = None,
        prefill_batch: PrefillBatch | None = None,
    ):
        """`allreduce`: the file's `allreduce_nccl` entry for this tp and hidden size (measured
        through NCCL); without one the all-reduce keeps the roofline's formula. `shared_reads`:
        the file's measured price of decodes reading pages another decode of the step reads
        (without it a shared page costs what a distinct one does). `ragged`: the file's measured
        price of a decode batch of unequal contexts (without it, the table at the mean).
        `prefill_batch`: the file's launch model of a step's prefill chunks in one launch (without
        it, the sum of the chunks' table times)."""
        validate_table(table)
        want = expected_shapes(model, tp)
        got = {k: int(table["shapes"].get(k, -1)) for k in want}
        if got != want:
            raise CalibrationError(
                f"table for {table['model']} tp={table['tp']} has shapes {got}, model needs {want}"
            )
        self.model, self.gpu, self.tp, self.table = model, gpu, tp, table
        self.name = f"calibrated:{Path(str(gpu.calibration or gpu.name)).stem}"
        self._layers = model.num_layers
        self._gemm = _Grid1(table["gemm"]["tokens"], table["gemm"]["ms"])
        self._lm = _Grid1(table["lm_head"]["tokens"], table["lm_head"]["ms"])
        d, p = table["decode_attn"], table["prefill_attn"]
        self._decode = _Grid2(d["batch"], d["context"], d["ms"])
        self._prefill = _Grid2(p["new_tokens"], p["context"], p["ms"])
        self._roofline = RooflineLatency(model, gpu, tp)
        self.shared_reads = shared_reads
        self.ragged = ragged
        self.prefill_batch = prefill_batch
        c = table.get("cascade_prefix_attn")
        self._cascade = _Grid2(c["group_size"], c["prefix_len"], c["ms"]) if c else None
        if allreduce is not None and tp > 1:
            self.terms = (*TERMS[:-1], "allreduce_nccl_s")
            grid = _Grid1(allreduce["tokens"], allreduce["ms"])
            # Two all-reduces of the step's activations per layer (after attention, after the MLP).
            calls = 2 * model.num_layers
            self._allreduce = functools.lru_cache(maxsize=4096)(
                lambda tokens: calls * grid(float(tokens)) * 1e-3
            )
        else:
            self.terms = TERMS
            self._allreduce = functools.lru_cache(maxsize=4096)(self._roofline.allreduce_s)

    def breakdown(self, plan: Any) -> dict[str, float]:
        """Seconds per part of the step (all layers); `allreduce_roofline_s` is not measured."""
        dec = np.asarray(plan.decode_ctx, dtype=np.int64)
        return self.parts(
            StepShape(
                np.asarray(plan.prefill_new, dtype=np.int64).tolist(),
                np.asarray(plan.prefill_ctx, dtype=np.int64).tolist(),
                int(dec.size),
                int(dec.sum()),
                int(plan.decode_shared_tokens),
                int(plan.decode_ctx_max),
            )
        )

    def parts(self, shape: StepShape) -> dict[str, float]:
        """`breakdown` of a step given as plain ints (the simulator's hot path)."""
        return dict(zip(self.terms, self._terms(shape), strict=True))

    def shape_time_s(self, shape: StepShape) -> float:
        # A left-to-right sum in TERMS order (not fsum): `decode_steps_s` repeats it
        # elementwise in numpy and gets the same floats.
        return sum(self._terms(shape))

    def decode_steps_s(self, num_decode: int, ctx_sums: np.ndarray) -> np.ndarray:
        """`shape_time_s` of decode-only steps of num_decode sequences, one per decode context
        sum in `ctx_sums` (int64): the same float for each, computed in one numpy pass (the
        simulator prices a stretch of decode-only steps at once)."""
        ctx_sums = np.asarray(ctx_sums, dtype=np.int64)
        if num_decode == 0:  # an empty step: whatever it costs, the same for every element
            return np.full(ctx_sums.shape, self.shape_time_s(StepShape([], [], 0, 0)))
        gemm, _, prefill, lm, allreduce = self._terms(StepShape([], [], num_decode, 0))
        mean_ctx = ctx_sums.astype(np.float64) / num_decode
        decode_attn = self._layers * self._decode.many(float(num_decode), mean_ctx) * 1e-3
        return 0 + gemm + decode_attn + prefill + lm + allreduce

    def cascade_prefix_s(self, group_size: int, prefix_tokens: int) -> float:
        """One group's shared-prefix pass of a cascade decode (all layers): measured when the
        file has a `cascade_prefix_attn` table, else the roofline's bytes-read-once bound."""
        if self._cascade is None:
            return self._roofline.cascade_prefix_s(group_size, prefix_tokens)
        return self._layers * self._cascade(float(group_size), float(prefix_tokens)) * 1e-3

    def _terms(self, shape: StepShape) -> tuple[float, ...]:
        """Seconds per priced term, in the order of TERMS (a new term: one more name there and
        one more value here)."""
        new, num_decode = shape.prefill_new, shape.num_decode
        tokens = sum(new) + num_decode
        if tokens == 0:
            return (0.0,) * len(TERMS)
        layers = self._layers
        decode_attn = 0.0
        if num_decode:
            ctx_sum: float = float(shape.decode_ctx_sum)  # (a float: compiled, a C double)
            if shape.decode_shared_tokens and self.shared_reads is not None:
                ctx_sum = self.shared_reads.effective_tokens(ctx_sum, shape.decode_shared_tokens)
            mean_ctx = float(ctx_sum) / num_decode
            decode_attn = layers * self._decode(num_decode, mean_ctx) * 1e-3
            if shape.decode_ctx_max and self.ragged is not None:
                real_mean = shape.decode_ctx_sum / num_decode
                decode_attn *= self.ragged.factor(real_mean, shape.decode_ctx_max)
        prefill_attn = 0.0
        if new:
            prefill = self._prefill
            alone = [
                prefill(float(n), float(c))
                for n, c in zip(new, shape.prefill_ctx, strict=True)
                if n > 0
            ]
            if self.prefill_batch is not None and len(alone) > 1:
                # one launch, never below its costliest chunk alone (prefill_batch.py)
                per_layer = max(self.prefill_batch.ms(new, shape.prefill_ctx), max(alone))
            else:
                per_layer = sum(alone)
            prefill_attn = layers * per_layer * 1e-3
        return (
            layers * self._gemm(tokens) * 1e-3,
            decode_attn,
            prefill_attn,
            self._lm(float(num_decode + len(new))) * 1e-3,
            self._allreduce(tokens),
        )

    def measured_part_s(self, plan: Any) -> float:
        """The parts priced from measurements only (the step time without the all-reduce)."""
        b = self.breakdown(plan)
        return b["gemm_s"] + b["decode_attn_s"] + b["prefill_attn_s"] + b["lm_head_s"]

    def step_time_s(self, plan: Any) -> float:
        return sum(self.breakdown(plan).values())


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int) -> dict:
    """load_calibration once per file version: every cluster of a sweep builds a latency model."""
    return load_calibration(path)


def calibrated_latency_for(
    model: Any, gpu: Any, tp: int, directory: Path
) -> CalibratedLatency | None:
    """CalibratedLatency if `gpu.calibration` names a valid file in `directory` holding a table
    for this model and TP; None otherwise (the caller falls back to the roofline)."""
    if not getattr(gpu, "calibration", None):
        return None
    path = Path(directory) / gpu.calibration
    if not path.is_file():
        present = ", ".join(sorted(p.name for p in Path(directory).glob("*.json"))) or "none"
        raise CalibrationError(
            f"gpu.calibration: no file {gpu.calibration!r} in kernels/calibration (present: {present})"
        )
    data = _load_cached(str(path), path.stat().st_mtime_ns)
    table = find_table(data, model, tp)
    if table is None:
        return None
    return CalibratedLatency(
        model,
        gpu,
        tp,
        table,
        find_allreduce(data, model, tp),
        _shared_reads(data, gpu, path),
        _ragged(data, gpu, path),
        _prefill_batch(data, gpu, path, model, tp),
    )


def _shared_reads(data: dict, gpu: Any, path: Path) -> SharedReads | None:
    """The measured shared-page term when `gpu.shared_page_reads` asks for it."""
    entry = _measured_entry(
        data, gpu, path, "shared_page_reads", ("l2", "hbm"), "decode_shared_reads"
    )
    return None if entry is None else shared_reads_from(entry)


def _measured_entry(
    data: dict,
    gpu: Any,
    path: Path,
    field: str,
    on_off: tuple[str, str],
    key: str,
    fit: str = "engine/runs/fit_shared_reads.py --write",
) -> Any:
    """The file's `key` entry when `gpu.<field>` is on (on_off[0]), None when it is off; a
    missing entry is an error naming the field, the file and the way out."""
    if getattr(gpu, field, on_off[1]) != on_off[0]:
        return None
    entry = data.get(key)
    if entry is None:
        raise CalibrationError(
            f"gpu.{field}: {on_off[0]} needs a {key} entry in {path.name} ({fit}); use {on_off[1]}"
        )
    return entry


def find_allreduce(data: dict, model: Any, tp: int) -> dict | None:
    """The NCCL all-reduce measured for this tp and hidden size, if the file has one."""
    for entry in data.get("allreduce_nccl", []):
        if int(entry.get("tp", 0)) == tp and int(entry.get("hidden", 0)) == model.hidden_size:
            _axis(entry["tokens"], "allreduce_nccl.tokens")
            return entry
    return None


def _ragged(data: dict, gpu: Any, path: Path) -> RaggedDecode | None:
    """The measured ragged-batch term when `gpu.ragged_decode` asks for it."""
    entry = _measured_entry(data, gpu, path, "ragged_decode", ("measured", "mean"), "decode_ragged")
    if entry is None:
        return None
    try:
        a, b, e = float(entry["a"]), float(entry["b"]), float(entry["e"])
        ref = int(entry["ref_ctx"])
    except (TypeError, KeyError, ValueError, OverflowError) as exc:
        raise CalibrationError(
            f"decode_ragged: needs numbers 'a', 'b', 'e' and 'ref_ctx', got {entry!r}"
        ) from exc
    if not (0.0 <= a < 1.0 and 0.0 < b <= 100.0 and 0.0 <= e <= 4.0 and ref > 0):
        raise CalibrationError(
            f"decode_ragged: needs 0 <= a < 1, 0 < b <= 100, 0 <= e <= 4, ref_ctx > 0, got {entry!r}"
        )
    return RaggedDecode(a, b, e, ref)


def _prefill_batch(data: dict, gpu: Any, path: Path, model: Any, tp: int) -> PrefillBatch | None:
    """The measured launch model of this attention shard when `gpu.prefill_batch` asks for it."""
    fit = "engine/runs/prefill_batches.py fit FILE --write"
    entries = _measured_entry(
        data, gpu, path, "prefill_batch", ("measured", "sum"), "prefill_batches", fit
    )
    if entries is None:
        return None
    if not isinstance(entries, list):
        raise CalibrationError(f"prefill_batches: needs a list of shards, got {entries!r}")
    shard = (model.num_q_heads // tp, model.num_kv_heads // tp, model.head_dim)
    for entry in entries:
        found = _prefill_batch_entry(entry, shard)
        if found is not None:
            return found
    raise CalibrationError(
        f"gpu.prefill_batch: measured needs a prefill_batches entry for {shard[0]} query / "
        f"{shard[1]} KV heads of {shard[2]} in {path.name} ({fit}); use sum"
    )


def _prefill_batch_entry(entry: Any, shard: tuple[int, int, int]) -> PrefillBatch | None:
    """One `prefill_batches` entry as the model when it is this shard's, checked."""
    try:
        heads = (int(entry["q_heads"]), int(entry["kv_heads"]), int(entry["head_dim"]))
        coef = tuple(float(entry[k]) for k in COEFFICIENTS)
        block_m, sms = int(entry["block_m"]), int(entry["sms"])
    except (TypeError, KeyError, ValueError, OverflowError) as exc:
        raise CalibrationError(
            f"prefill_batches: an entry needs q_heads, kv_heads, head_dim, block_m, sms and "
            f"numbers {COEFFICIENTS}, got {entry!r}"
        ) from exc
    if heads != shard:
        return None
    group = heads[0] // heads[1]
    padded = pow2(group)
    if block_m & (block_m - 1) or block_m < max(16, padded) or sms < 1:
        raise CalibrationError(
            f"prefill_batches: needs block_m a power of two >= 16 and >= the padded group "
            f"{padded}, sms >= 1, got {entry!r}"
        )
    if not all(math.isfinite(c) for c in coef):
        raise CalibrationError(f"prefill_batches: coefficients must be finite, got {entry!r}")
    return PrefillBatch(coef, group, heads[1], block_m, sms)  # type: ignore[arg-type]


def shared_reads_from(entry: Any) -> SharedReads | None:
    """The file's `decode_shared_reads` entry, checked (None: the file has none)."""
    if entry is None:
        return None
    try:
        rho, p = float(entry["rho"]), float(entry["p"])
    except (TypeError, KeyError, ValueError) as exc:
        raise CalibrationError(
            f"decode_shared_reads: needs numbers 'rho' and 'p', got {entry!r}"
        ) from exc
    if not (0.0 < rho < 1.0 and 1.0 <= p <= 64.0):
        raise CalibrationError(
            f"decode_shared_reads: needs 0 < rho < 1 and 1 <= p <= 64, got {entry!r}"
        )
    return SharedReads(rho, p)
