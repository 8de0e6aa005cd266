#!/usr/bin/env bash
# One device call: bench (TUNE=1: search configs first), DRAM bytes of both variants under ncu,
# calibrate with the bench's config, then the kernel tests on the GPU.
# Usage (GPU machine, repo root): OUT=dir [TUNE=1] bash kernels/device_run.sh [TARGETS] [N]
set -u
export PYTHONUNBUFFERED=1
targets=${1:-article-70b:2,llama-3-8b:1,llama-3-70b:2}
fidelity=${2:-30}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
  2>&1 | tee "$OUT/bench.log"
tune_flag=$([ "${TUNE:-0}" = 1 ] && echo --tune)
timeout 230 python3 -m kernels.bench $tune_flag --out "$OUT/bench.json" 2>&1 | tee -a "$OUT/bench.log"
cfg=$(python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1])).get('config', {})))" \
  "$OUT/bench.json" 2>/dev/null || echo '{}')
echo "# kernel config: $cfg"
ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$ncu_bin" ]; then
  timeout 90 "$ncu_bin" --clock-control none --csv -k regex:_paged_decode_kernel \
    --metrics dram__bytes_read.sum,lts__t_bytes.sum,gpu__time_duration.sum \
    python3 -m kernels.bench --profile --config "$cfg" >"$OUT/ncu.csv" 2>&1
  tail -n 4 "$OUT/ncu.csv"
fi
timeout 240 python3 -m kernels.calibrate --targets "$targets" --fidelity "$fidelity" \
  --kernel-config "$cfg" --out "$OUT/h200.json" 2>&1 | tee "$OUT/calibrate.log"
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/kernels 2>&1 | tee "$OUT/pytest_gpu.log"
