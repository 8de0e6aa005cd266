#!/usr/bin/env bash
# Issue 13 device calls (GPU machine, repo root): OUT=dir bash kernels/device_run_prefill.sh MODE
#   tune : kernel tests on the GPU (no Hypothesis), prefill config sweep, prefill + cascade bench
#   final: quick GPU correctness subset (stops on failure), short config sweep + bench (SDPA,
#          Flex, cascade), calibration of prefill_attn + cascade_prefix_attn with the swept
#          config, NCCL all-reduce on 2 GPUs (when there are 2)
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
mode=${1:-tune}
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
