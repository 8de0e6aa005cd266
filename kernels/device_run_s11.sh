#!/usr/bin/env bash
# Issue 13 device calls of session 11 (GPU machine; run from a clean export of the committed
# tree): OUT=dir [BUDGET=s] bash kernels/device_run_s11.sh sweep|calib
# Session 11's questions:
# - 1-64 new tokens over 32K (the prefix hit) at <= 2x the roofline: 16 tokens ran 2.22x (2.06x
#   with the opt-in 2-row x 16-split combine, 4755b86), 64 tokens 2.24x. Loop 2's main launch
#   for 16 tokens is ~42 us of compute-bound work at its usual rate (17.2 GFLOP); what is left to
#   cut is the second launch: its shape by split count (`COMBINE_BY_SPLITS`) and launching it as
#   a programmatic dependent of the main kernel (`pdl_combine`: its launch under the main
#   kernel's tail; the decode kernel's separate combine for > 12 splits too, with the main
#   kernel triggering it at its start).
# - deferred_row_sum at GROUP 4 (llama-3-8b): 162 registers (3 programs per SM) in session 10;
#   with Triton's maxnreg 128 the triton 3.6 sm_90a compile has 80 bytes of spill stores and
#   L1 loads of loop invariants in the loop. Timed on the 8B and the TP-2 attention shards.
# sweep (call 1): 1. GPU tests (split combine shapes, PDL combine, deferred row sums)
#         2. small chunks over 8K / 32K: combine shapes x PDL, prepared launches, two passes
#         3. decode launches with a separate combine: PDL vs plain (prepared, two passes)
#         4. decode on the calibration's shards (32 q / 8 KV, 32 q / 4 KV): deferred_row_sum
#            (capped at 128 registers) vs the defaults, prepared, two passes
# Call 1's sweep chose the prefill combine shape by split count (2 x 16 from 12 splits, 1 x 32
# from 32: COMBINE_BY_SPLITS); PDL and deferred_row_sum (capped) stay off (slower or no gain).
# calib (call 2): GPU tests of the defaults, then ONE re-calibration of every part but the NCCL
#         all-reduce on one machine with decode and prefill attention timed as the engine runs
#         them (prepared once per step, launched per layer) and decode_attn's batch grid with
#         12 / 24 / 40 / 48 / 96, --fidelity 30 --fidelity-extra 12; then the decode targets vs
#         SDPA and the small-chunk targets with the defaults
# gemm (call 3, the lead's 170 s): call 2's tables priced one held-out 70B TP-2 step (555 GEMM
#         tokens) 17% low: the GEMM grid skipped cuBLAS's steps between 512 and 640 tokens.
#         kernels.calibrate --parts gemm,lm_head on the denser GEMM_TOKENS, with the held-out
#         compositions re-measured on the same machine (--fidelity 30 --fidelity-extra 12); the
#         attention tables are call 2's (the snapshot carries call 2's h200.json)
mode=${1:-sweep}
. "$(dirname "$0")/device_budget.sh"
if [ "$mode" = gemm ]; then
  device_start 130
  step "calibrate gemm,lm_head (denser token grid) + fidelity 30 + 12; attention tables kept (call 2)"
  cp kernels/calibration/h200.json kernels/calibration/h200_fidelity.json "$OUT/"
  timeout "$(left 125 0)" python3 -m kernels.calibrate --parts gemm,lm_head \
    --fidelity 30 --fidelity-extra 12 --out "$OUT/h200.json" --fidelity-out "$OUT/h200_fidelity.json" \
    2>&1 | tee -a "$log"
  step "done"
  exit 0
fi
PDL='{"pdl_combine": true}'
if [ "$mode" = calib ]; then
  device_start 400
  step "pytest (GPU): prefill split combine, decode PDL / fused combine, prepared launches"
  timeout "$(left 45 330)" python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_paged_prefill.py \
    tests/kernels/test_paged_decode.py tests/kernels/test_prepared_launch.py \
    -k "split_combine or pdl or fused or prepared or gqa_ratios" 2>&1 | tail -n 8 | tee -a "$log"
  step "calibrate gemm,lm_head,decode,prefill,cascade + fidelity 30 + 12 (defaults, prepared launches)"
  cp kernels/calibration/h200.json kernels/calibration/h200_fidelity.json "$OUT/"
  timeout "$(left 300 40)" python3 -m kernels.calibrate --parts gemm,lm_head,decode,prefill,cascade \
    --fidelity 30 --fidelity-extra 12 --out "$OUT/h200.json" --fidelity-out "$OUT/h200_fidelity.json" \
    2>&1 | tee -a "$log"
  step "targets: decode vs SDPA (per-call and prepared), small chunks over 32K"
  timeout "$(left 40 0)" python3 -m kernels.bench --out "$OUT/bench_decode_s11_call2.json" \
    --sweep-sdpa --sweep-shapes '["16x2K", "16x8K", "16x32K", "64x2K", "64x8K", "64x32K", "256x2K",
    "256x8K", "1x128K", "12x4500", "24x2K", "48x4500"]' --decode-sweep '[{}, {"_prepared": true}]' \
    2>&1 | tee -a "$log"
  timeout "$(left 30 0)" python3 -m kernels.bench_prefill --suite small --out "$OUT/bench_small_s11_call2.json" \
    --small-cases '[[32768, 1], [32768, 2], [32768, 4], [32768, 8], [32768, 16], [32768, 64]]' \
    2>&1 | tee -a "$log"
  step "done"
  exit 0
fi
[ "$mode" = sweep ] || { echo "unknown mode $mode"; exit 2; }
device_start 300
step "pytest (GPU): split combine shapes, PDL combine, deferred row sums"
timeout "$(left 45 240)" python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_paged_prefill.py \
  tests/kernels/test_paged_decode.py -k "split_combine or pdl or deferred or caps_registers" 2>&1 \
  | tail -n 8 | tee -a "$log"
step "small chunks over 8K / 32K: combine shapes x PDL (prepared, two passes)"
CASES='[[32768, 1], [32768, 2], [32768, 4], [32768, 8], [32768, 16], [32768, 24], [32768, 32],
  [32768, 48], [32768, 64], [8192, 1], [8192, 4], [8192, 16], [8192, 32], [8192, 64]]'
VARIANTS='[{}, '"$PDL"', {"combine_rows": 2, "combine_splits": 16},
  {"combine_rows": 2, "combine_splits": 16, "pdl_combine": true}, {"combine_rows": 4, "combine_splits": 8},
  {"combine_rows": 4, "combine_splits": 8, "pdl_combine": true},
  {"combine_rows": 8, "combine_splits": 4, "pdl_combine": true},
  {"combine_rows": 1, "combine_splits": 32, "pdl_combine": true}]'
timeout "$(left 110 110)" python3 -m kernels.bench_prefill --suite small --out "$OUT/bench_small_s11_call1.json" \
  --small-cases "$CASES" --small-variants "$VARIANTS" 2>&1 | tee -a "$log"
step "decode with a separate combine: PDL vs plain (prepared; each twice)"
timeout "$(left 40 60)" python3 -m kernels.bench --out "$OUT/bench_decode_pdl_s11_call1.json" \
  --sweep-shapes '["1x8K", "1x32K", "1x128K", "2x32K", "4x32K", "seed-mix",
  ["8xU0.5-32K", {"n": 8, "lo": 512, "hi": 32768, "seed": 9}]]' \
  --decode-sweep '[{"_prepared": true}, {"pdl_combine": true, "_prepared": true},
  {"pdl_combine": true, "_prepared": true, "_rep": 2}, {"_prepared": true, "_rep": 2}]' 2>&1 | tee -a "$log"
step "decode on the calibration's attention shards: deferred_row_sum (maxnreg 128) vs defaults"
timeout "$(left 60 0)" python3 - <<'PY' 2>&1 | tee -a "$log"
import json, os
import numpy as np
from kernels.bench import bench_ms
from kernels.calibrate import LayerParts
rows = []
lens_sets = {f"{b}x{c}": [c] * b for b in (16, 64, 128, 256) for c in (512, 2048, 8192)}
rng = np.random.default_rng(9)
lens_sets["64xU1-8K"] = rng.integers(1024, 8193, 64).tolist()
lens_sets["128xU0.5-8K"] = rng.integers(512, 8193, 128).tolist()
for heads in ((32, 8), (32, 4)):
    shapes = dict(num_q_heads=heads[0], num_kv_heads=heads[1], head_dim=128, hidden_size=128,
                  intermediate_size=128, vocab_size=128)
    for cfgs in (({}, {"deferred_row_sum": True}),):
        parts = [LayerParts(shapes, 8, 256 * 8192 + 64, cfg) for cfg in cfgs]
        for name, lens in lens_sets.items():
            runs = [p.decode(lens) for p in parts]
            first = [bench_ms(r) for r in runs]
            second = [bench_ms(r) for r in reversed(runs)][::-1]
            ms = [(a + b) / 2 for a, b in zip(first, second)]
            rows.append({"shard": f"{heads[0]}q/{heads[1]}kv", "case": name, "ms_default": ms[0],
                         "ms_deferred": ms[1], "passes": [first, second]})
            print(f"  {heads[0]}q/{heads[1]}kv {name:<12} default {ms[0]:.4f} deferred {ms[1]:.4f} "
                  f"({ms[1] / ms[0]:.3f})", flush=True)
        del parts
json.dump(rows, open(os.path.join(os.environ["OUT"], "decode_deferred_s11_call1.json"), "w"), indent=1)
PY
step "done"
exit 0
