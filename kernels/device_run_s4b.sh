#!/usr/bin/env bash
# Issue 13/14 device call 2 of session 4 (clean export of the committed tree):
#   OUT=dir [BUDGET=s] bash kernels/device_run_s4b.sh
#   1. GPU tests: prepared launches (the direct launcher path on triton's HookChain hooks), plan
#   2. kernels.bench_launch: host us per layer, wrappers vs prepared launches
#   3. kernels.bench_splits: multi-wave key splits vs the one-wave rule
#   4. kernels.calibrate --parts "" --fidelity 30 --fidelity-extra 12: the held-out compositions
#      re-measured with this kernel (tables unchanged: the calibration grid plans are the same)
# Outputs: run.log, bench_launch.json, bench_splits.json, h200_fidelity.json.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$(date +%s)
budget=${BUDGET:-240}
log="$OUT/run.log"
. "$(dirname "$0")/device_budget.sh"
device_header
cat SNAPSHOT 2>/dev/null | tee -a "$log"
step "pytest (GPU): prepared launches, split planner"
timeout "$(left 45 190)" python3 -m pytest -q -p no:cacheprovider tests/kernels/test_prepared_launch.py \
  tests/kernels/test_paged_prefill.py -k "not random and (split or plan or wave or prepared or launch or device or hook or wide or gpu or decode)" \
  2>&1 | tail -n 25 | tee -a "$log"
step "bench_launch"
timeout "$(left 40 150)" python3 -m kernels.bench_launch --layers 32 --steps 50 \
  --json "$OUT/bench_launch.json" 2>&1 | tee -a "$log"
step "bench_splits"
timeout "$(left 45 105)" python3 -m kernels.bench_splits --out "$OUT/bench_splits.json" \
  2>&1 | tee -a "$log"
step "calibrate --parts '' --fidelity 30 --fidelity-extra 12"
cp kernels/calibration/h200.json kernels/calibration/h200_fidelity.json "$OUT/"
timeout "$(left 105 0)" python3 -m kernels.calibrate --parts "" --fidelity 30 --fidelity-extra 12 \
  --out "$OUT/h200.json" --fidelity-out "$OUT/h200_fidelity.json" 2>&1 | tee -a "$log"
rm -f "$OUT/h200.json"
step "done"
