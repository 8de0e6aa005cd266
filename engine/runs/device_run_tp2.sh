#!/bin/bash
# One device call on nvidia-h200-x2: article-70b at TP 2, one process per GPU through NCCL (the
# machine's NCCL settings, NVLink multicast off, are inherited; do not override them).
# carry: .whl (as device_run.sh)
# env: SERVE_TIMEOUT (seconds torchrun may take, default 420: past it every rank is killed, so
#      the runs written so far still come back), GRAPHS, CONFIGS, REPEAT (as device_run.sh)
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee $OUT/gpu.txt
env | grep ^NCCL | tee -a $OUT/gpu.txt
# A rank stuck in a collective never exits by itself: the timeout kills the whole group (TERM,
# then KILL 10 s later), and the archive below runs whatever happened.
source engine/runs/device_common.sh
log_gpu_clocks $OUT/gpu_clocks.csv
REPEATS=$(repeat_configs) || exit 1
timeout -k 10 ${SERVE_TIMEOUT:-420} torchrun --nproc-per-node 2 -m kvsched.engine_run \
  --graphs ${GRAPHS:-all} --out-root $OUT/runs ${CONFIGS:-\
  --config engine/runs/configs/article70b_tp2_shared_prefix.yaml \
  --config engine/runs/configs/article70b_tp2_overhead_probe.yaml \
  --config engine/runs/configs/article70b_tp2_host_probe.yaml} $REPEATS 2>&1 | tee $OUT/serve_tp2.log
echo "torchrun exit: ${PIPESTATUS[0]}" | tee -a $OUT/serve_tp2.log
tar czf $OUT/runs_tp2.tgz -C $OUT runs && rm -rf $OUT/runs
kill $CLOCKS 2>/dev/null
