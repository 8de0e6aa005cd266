#!/usr/bin/env bash
# Issue 13 device calls of session 5 (GPU machine; run from a clean export of the committed
# tree): OUT=dir [BUDGET=s] bash kernels/device_run_s5.sh sweep|final
#   sweep: 1. GPU tests: fused combine + reversed splits, one-token prefill chunks, cascade
#          2. kernels.bench --decode-sweep --sweep-sdpa: decode split policies, fused combine and
#             reversed splits on the target shapes (with SDPA), 1 x 32K, 1 x 128K, seed mix
#          3. kernels.bench_prefill --no-sdpa --suite prefill: the issue-13 prefill target rows
#          4. kernels.bench_prefill --suite cascade --cascade-variants: cascade on the seed mix
#   final: 1. GPU tests (subset)
#          2. kernels.calibrate --parts decode,prefill,cascade --fidelity 30 --fidelity-extra 12
#          3. kernels.bench --decode-sweep: the defaults and the separate combine, with SDPA
#          4. kernels.bench_prefill --no-sdpa: prefill target rows + cascade variants
# Outputs: run.log and the JSON files named below.
mode=${1:-sweep}
. "$(dirname "$0")/device_budget.sh"
device_start 300
tests="tests/kernels/test_paged_decode.py tests/kernels/test_paged_prefill.py tests/kernels/test_cascade_decode.py"
if [ "$mode" = sweep ]; then
  step "pytest (GPU): fused combine, reversed splits, one-token chunks, cascade"
  timeout "$(left 60 230)" python3 -m pytest -q -x -p no:cacheprovider $tests \
    -k "fused or one_token or plan or gqa or page_sizes or (cascade and not random)" \
    2>&1 | tail -n 15 | tee -a "$log"
  step "decode sweep (SDPA on the uniform shapes)"
  timeout "$(left 100 130)" python3 -m kernels.bench --out "$OUT/bench_decode_sweep.json" \
    --sweep-sdpa --decode-sweep '[{}, {"fused_combine": true}, {"reverse_splits": true},
      {"fused_combine": true, "reverse_splits": true}, {"programs_per_sm": 4},
      {"programs_per_sm": 4, "reverse_splits": true},
      {"programs_per_sm": 4, "reverse_splits": true, "fused_combine": true},
      {"programs_per_sm": 8, "reverse_splits": true, "fused_combine": true},
      {"block_n": 128, "num_warps": 8, "fused_combine": true, "reverse_splits": true}]' \
    2>&1 | tee -a "$log"
  step "prefill target rows (defaults; one-token chunks through the decode kernel)"
  timeout "$(left 40 70)" python3 -m kernels.bench_prefill --no-sdpa --suite prefill \
    --out "$OUT/bench_prefill.json" 2>&1 | tee -a "$log"
  step "cascade variants on the seed mix"
  timeout "$(left 70 0)" python3 -m kernels.bench_prefill --suite cascade \
    --out "$OUT/bench_cascade.json" --cascade-variants '[[{}, {}],
      [{}, {"fused_combine": true, "reverse_splits": true}],
      [{"programs_per_sm": 2}, {"fused_combine": true, "reverse_splits": true}],
      [{"min_split_tokens": 4096}, {"fused_combine": true, "reverse_splits": true}],
      [{"block_m": 64, "num_warps": 4, "num_stages": 2}, {"fused_combine": true, "reverse_splits": true}],
      [{"block_m": 64, "num_warps": 4, "num_stages": 2, "min_split_tokens": 4096},
       {"fused_combine": true, "reverse_splits": true}]]' \
    2>&1 | tee -a "$log"
  step "done"
  exit 0
fi
step "pytest (GPU): fused combine, device splits, one-token chunks, cascade (subset)"
timeout "$(left 45 275)" python3 -m pytest -q -x -p no:cacheprovider $tests \
  tests/kernels/test_prepared_launch.py -k "fused or one_token or device or split or layers or (cascade and not random)" \
  2>&1 | tail -n 10 | tee -a "$log"
step "calibrate decode,prefill,cascade + fidelity 30 + 12"
cp kernels/calibration/h200.json kernels/calibration/h200_fidelity.json "$OUT/"
timeout "$(left 200 75)" python3 -m kernels.calibrate --parts decode,prefill,cascade \
  --fidelity 30 --fidelity-extra 12 --out "$OUT/h200.json" \
  --fidelity-out "$OUT/h200_fidelity.json" 2>&1 | tee -a "$log"
step "decode: defaults vs the separate combine launch (SDPA on the uniform shapes)"
timeout "$(left 35 40)" python3 -m kernels.bench --out "$OUT/bench_decode_final.json" \
  --sweep-sdpa --decode-sweep '[{}, {"fused_combine": false}]' 2>&1 | tee -a "$log"
step "prefill target rows + cascade (defaults; old prefix-pass config; separate combine)"
timeout "$(left 40 0)" python3 -m kernels.bench_prefill --no-sdpa --out "$OUT/bench_prefill.json" \
  --cascade-variants '[[{}, {}], [{"block_m": 128, "num_warps": 8, "num_stages": 3}, {}],
    [{}, {"fused_combine": false}]]' 2>&1 | tee -a "$log"
step "done"
