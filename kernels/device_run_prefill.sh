#!/usr/bin/env bash
# Issue 13 device calls (GPU machine, repo root): OUT=dir bash kernels/device_run_prefill.sh MODE
#   tune : kernel tests on the GPU (no Hypothesis), prefill config sweep, prefill + cascade bench
#   final: bench with CONFIG (JSON) and Flex, calibration of prefill_attn + cascade_prefix_attn,
#          NCCL all-reduce on 2 GPUs (if there are 2), then the full kernel tests
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
mode=${1:-tune}
cfg=${CONFIG:-{\}}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
  2>&1 | tee "$OUT/device.log"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda, torch.cuda.device_count())" | tee -a "$OUT/device.log"
if [ "$mode" = tune ]; then
  timeout 70 python3 -m pytest -q -x -p no:cacheprovider -k "not random" \
    tests/kernels/test_paged_prefill.py tests/kernels/test_cascade_decode.py \
    tests/kernels/test_prefill_launcher_errors.py 2>&1 | tee "$OUT/pytest_gpu_tune.log"
  timeout 150 python3 -m kernels.bench_prefill --tune --tune-budget 55 \
    --out "$OUT/bench_prefill_tune.json" 2>&1 | tee "$OUT/bench_prefill_tune.log"
else
  timeout 110 python3 -m kernels.bench_prefill --flex --config "$cfg" \
    --prefix-config "${PREFIX_CONFIG:-{\}}" --out "$OUT/bench_prefill.json" 2>&1 | tee "$OUT/bench_prefill.log"
  cp kernels/calibration/h200.json "$OUT/h200.json"
  timeout 100 python3 -m kernels.calibrate --parts prefill,cascade --prefill-config "$cfg" \
    --cascade-config "${PREFIX_CONFIG:-{\}}" --out "$OUT/h200.json" 2>&1 | tee "$OUT/calibrate.log"
  if [ "$(python3 -c 'import torch; print(torch.cuda.device_count())')" -ge 2 ]; then
    timeout 60 python3 -m kernels.allreduce --out "$OUT/allreduce.json" \
      --calibration "$OUT/h200.json" 2>&1 | tee "$OUT/allreduce.log"
  fi
  timeout 60 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_paged_prefill.py \
    tests/kernels/test_cascade_decode.py tests/kernels/test_prefill_launcher_errors.py \
    tests/kernels/test_paged_decode.py 2>&1 | tee "$OUT/pytest_gpu.log"
fi
