#!/usr/bin/env bash
# One device call: tune + bench, calibrate with the tuned config, then the kernel tests on the GPU.
# Usage (on the GPU machine, repo root): OUT=dir bash kernels/device_run.sh [TARGETS] [FIDELITY]
set -u
export PYTHONUNBUFFERED=1
targets=${1:-article-70b:2,llama-3-8b:1,llama-3-70b:2}
fidelity=${2:-30}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
  >"$OUT/smi.txt" 2>&1
timeout 260 python3 -m kernels.bench --tune --out "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
cfg=$(python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1])).get('config', {})))" \
  "$OUT/bench.json" 2>/dev/null || echo '{}')
echo "# kernel config for calibration: $cfg"
timeout 240 python3 -m kernels.calibrate --targets "$targets" --fidelity "$fidelity" \
  --kernel-config "$cfg" --out "$OUT/h200.json" 2>&1 | tee "$OUT/calibrate.log"
timeout 60 python3 -m pytest -q -p no:cacheprovider -x tests/kernels 2>&1 | tee "$OUT/pytest_gpu.log"
