#!/usr/bin/env bash
# Issue 13/14 device call of session 4 (GPU machine; run from a clean export of the committed
# tree): OUT=dir [BUDGET=s] bash kernels/device_run_s4.sh
#   1. GPU tests: prepared launches (direct launcher path), wide prefill tiles, a decode subset
#   2. kernels.bench_launch: host us per layer, wrappers vs prepared launches (+ bits equal)
#   3. kernels.bench_wide: 256-row "tiles_wide" vs 128-row "tiles" on both attention shards
#   4. if the wide tiles hold up (VERDICT keep): kernels.calibrate --parts prefill + fidelity
#      (30 base + 12 prefix-hit/cascade compositions per preset); else nothing is re-measured
#   5. kernels.bench_prefix_hit: the under-priced prefix-hit fidelity step's attention parts
#   6. kernels.bench_prefill (no SDPA): the issue-13 target rows with the kernel as it stands
# Outputs (<= 8 files): run.log, bench_launch.json, bench_wide.json, h200.json,
# h200_fidelity.json, bench_prefix_hit.json, bench_prefill.json. Each step has its own limit inside BUDGET (default 400).
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$(date +%s)
budget=${BUDGET:-400}
log="$OUT/run.log"
. "$(dirname "$0")/device_budget.sh"
device_header
cat SNAPSHOT 2>/dev/null | tee -a "$log"
step "pytest (GPU): prepared launches, wide tiles + plan classes, decode subset"
timeout "$(left 75 320)" python3 -m pytest -q -p no:cacheprovider \
  tests/kernels/test_prepared_launch.py tests/kernels/test_paged_prefill.py -k "not random" \
  2>&1 | tail -n 20 | tee -a "$log"
step "bench_launch: host us per layer, 32 layers (wrapper vs prepared)"
timeout "$(left 60 270)" python3 -m kernels.bench_launch --layers 32 --steps 50 \
  --json "$OUT/bench_launch.json" 2>&1 | tee -a "$log"
step "bench_wide: 256-row vs 128-row prefill tiles"
timeout "$(left 60 220)" python3 -m kernels.bench_wide --out "$OUT/bench_wide.json" \
  2>&1 | tee -a "$log"
verdict=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['verdict'])" \
  "$OUT/bench_wide.json" 2>/dev/null || echo off)
if [ "$verdict" = keep ]; then
  step "calibrate --parts prefill + fidelity 30 + 12 (wide tiles kept)"
  cp kernels/calibration/h200.json kernels/calibration/h200_fidelity.json "$OUT/"
  timeout "$(left 175 70)" python3 -m kernels.calibrate --parts prefill --fidelity 30 \
    --fidelity-extra 12 --out "$OUT/h200.json" --fidelity-out "$OUT/h200_fidelity.json" \
    2>&1 | tee -a "$log"
else
  step "wide tiles: verdict $verdict, prefill_attn not re-measured"
  export KVSCHED_WIDE_OFF=1
fi
step "bench_prefix_hit: the under-priced prefix-hit step's attention parts"
timeout "$(left 25 45)" python3 -m kernels.bench_prefix_hit --out "$OUT/bench_prefix_hit.json" \
  2>&1 | tee -a "$log"
step "bench_prefill (no SDPA): target rows"
timeout "$(left 45 0)" python3 -m kernels.bench_prefill --no-sdpa ${KVSCHED_WIDE_OFF:+--launch-configs '{"tiles_wide":{"block_m":128}}'} \
  --out "$OUT/bench_prefill.json" 2>&1 | tee -a "$log"
step "done"
