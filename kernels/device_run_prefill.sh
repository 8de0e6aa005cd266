#!/usr/bin/env bash
# Issue 13 device calls (GPU machine, repo root): OUT=dir bash kernels/device_run_prefill.sh MODE
#   all  : (session 3, one call) GPU kernel tests of prefill/cascade, per-work-class prefill
#          launch-config sweep + bench (few tokens over 32K included), calibration of
#          prefill_attn + cascade_prefix_attn with the swept configs plus the fidelity run
#          (30 base + 12 prefix-hit/cascade compositions per preset), then the decode targets.
#          Every step has its own time limit inside BUDGET seconds (default 400); the outputs
#          (<= 8 files) are run.log, bench_prefill_tune.json, bench_prefill.json,
#          prefill_launch_configs.json, h200.json, h200_fidelity.json, bench_decode.json.
#   probe: (session 3, call 2) decode split-policy sweep + 256-row prefill tile probe
#   tune : kernel tests on the GPU (no Hypothesis), prefill config sweep, prefill + cascade bench
#   final: quick GPU correctness subset (stops on failure), short config sweep + bench (SDPA,
#          Flex, cascade), calibration of prefill_attn + cascade_prefix_attn with the swept
#          config, NCCL all-reduce on 2 GPUs (when there are 2)
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mode=${1:-tune}
if [ "$mode" = probe ]; then
  # (session 3, call 2) decode split-policy sweep on the target shapes + seed mix, and a
  # 256-row tile probe of the prefill "tiles" class against the current default.
  log="$OUT/run.log"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu \
    --format=csv 2>&1 | tee -a "$log"
  echo "### $(date -u +%H:%M:%S) decode split sweep" | tee -a "$log"
  timeout "${DECODE_S:-70}" python3 -m kernels.bench --out "$OUT/bench_decode_sweep.json" \
    --decode-sweep '[{}, {"programs_per_sm": 4}, {"programs_per_sm": 4, "cap_to_mean": true},
      {"programs_per_sm": 8, "cap_to_mean": true}]' 2>&1 | tee -a "$log"
  echo "### $(date -u +%H:%M:%S) prefill tiles probe" | tee -a "$log"
  timeout "${PROBE_S:-60}" python3 -m kernels.bench_prefill --tune-only --tune-budget 45 \
    --out "$OUT/bench_prefill_probe.json" --candidates '{"tiles": [
      {"block_n": 128, "num_warps": 8, "num_stages": 3, "warp_specialize": true, "lazy_rescale": true},
      {"block_m": 256, "block_n": 64, "num_warps": 16, "num_stages": 2, "lazy_rescale": true},
      {"block_m": 256, "block_n": 128, "num_warps": 16, "num_stages": 2, "lazy_rescale": true},
      {"block_m": 256, "block_n": 64, "num_warps": 8, "num_stages": 2, "lazy_rescale": true}]}' \
    2>&1 | tee -a "$log"
  echo "### $(date -u +%H:%M:%S) done" | tee -a "$log"
  exit 0
fi
if [ "$mode" = all ]; then
  t0=$(date +%s)
  budget=${BUDGET:-400}
  log="$OUT/run.log"
  . "$(dirname "$0")/device_budget.sh"
  device_header
  git log -1 --format='tree %H %s' 2>/dev/null | tee -a "$log"
  step "pytest (GPU): prefill, cascade, prefill launcher"
  timeout "$(left 75 330)" python3 -m pytest -q -x -p no:cacheprovider -k "not random" \
    tests/kernels/test_paged_prefill.py tests/kernels/test_cascade_decode.py \
    tests/kernels/test_prefill_launcher_errors.py 2>&1 | tail -n 25 | tee -a "$log"
  step "bench_prefill --tune-only: per-class launch sweep (best so far saved after each gain)"
  timeout "$(left 105 225)" python3 -m kernels.bench_prefill --tune-only --tune-budget 80 \
    --out "$OUT/bench_prefill_tune.json" --launch-configs-out "$OUT/prefill_launch_configs.json" \
    2>&1 | tee -a "$log"
  [ -s "$OUT/prefill_launch_configs.json" ] || python3 -c "
import json; from kernels.paged_prefill import PREFILL_LAUNCH_CONFIGS as c
open('$OUT/prefill_launch_configs.json', 'w').write(json.dumps(c))"
  step "bench_prefill with the swept configs (no SDPA: run 2 has it), cascade"
  timeout "$(left 55 170)" python3 -m kernels.bench_prefill --no-sdpa \
    --launch-configs "$OUT/prefill_launch_configs.json" --out "$OUT/bench_prefill.json" \
    2>&1 | tee -a "$log"
  step "calibrate prefill,cascade + fidelity 30 + 12 extra (launch configs: $(cat "$OUT/prefill_launch_configs.json" | tr -d '\n '))"
  cp kernels/calibration/h200.json kernels/calibration/h200_fidelity.json "$OUT/"
  timeout "$(left 150 35)" python3 -m kernels.calibrate --parts prefill,cascade \
    --prefill-launch-configs "$OUT/prefill_launch_configs.json" --fidelity 30 --fidelity-extra 12 \
    --out "$OUT/h200.json" --fidelity-out "$OUT/h200_fidelity.json" 2>&1 | tee -a "$log"
  step "bench decode targets"
  timeout "$(left 60 0)" python3 -m kernels.bench --targets --out "$OUT/bench_decode.json" \
    2>&1 | tee -a "$log"
  step "done"
  exit 0
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
  2>&1 | tee "$OUT/device.log"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda, torch.cuda.device_count(), torch.cuda.nccl.version())" | tee -a "$OUT/device.log"
if [ "$mode" = tune ]; then
  timeout 70 python3 -m pytest -q -x -p no:cacheprovider -k "not random" \
    tests/kernels/test_paged_prefill.py tests/kernels/test_cascade_decode.py \
    tests/kernels/test_prefill_launcher_errors.py 2>&1 | tee "$OUT/pytest_gpu_tune.log"
  timeout 150 python3 -m kernels.bench_prefill --tune --tune-budget 55 \
    --out "$OUT/bench_prefill_tune.json" 2>&1 | tee "$OUT/bench_prefill_tune.log"
else
  set -o pipefail
  timeout 60 python3 -m pytest -q -x -p no:cacheprovider \
    -k "gqa_ratios or dtypes or context_only or non_causal or groups_with or decode_lse or reusing" \
    tests/kernels/test_paged_prefill.py tests/kernels/test_cascade_decode.py \
    2>&1 | tee "$OUT/pytest_gpu.log" || exit 1
  timeout 160 python3 -m kernels.bench_prefill --tune --tune-budget 30 --flex \
    --out "$OUT/bench_prefill.json" 2>&1 | tee "$OUT/bench_prefill.log"
  cfg=$(python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))['prefill_config']))" \
    "$OUT/bench_prefill.json" 2>/dev/null || echo '{}')
  echo "# prefill config for the calibration: $cfg"
  cp kernels/calibration/h200.json "$OUT/h200.json"
  timeout 110 python3 -m kernels.calibrate --parts prefill,cascade --prefill-config "$cfg" \
    --out "$OUT/h200.json" 2>&1 | tee "$OUT/calibrate.log"
  if [ "$(python3 -c 'import torch; print(torch.cuda.device_count())')" -ge 2 ]; then
    timeout 60 python3 -m kernels.allreduce --out "$OUT/allreduce.json" \
      --calibration "$OUT/h200.json" 2>&1 | tee "$OUT/allreduce.log"
  fi
fi
