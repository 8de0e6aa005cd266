#!/bin/bash
# One device call (nvidia-h200): the llama-3-8b logits check and graph benches, the fused
# elementwise bench, then the serving runs back to back.
# carry: .whl (pydantic, pydantic_core, annotated_types, typing_inspection, simpy, typing_extensions)
#        .engine_data (the derived Azure slice)
# env: GRAPHS (none | decode | all; default all), CONFIGS (default: the four runs and the two
#      probes; the probes price the workloads, so serve them in the same call), SKIP_CHECK=1,
#      SKIP_FUSED_BENCH=1 (the check without the fused elementwise bench), DURATION (override
#      duration_s), KVSCHED_ENGINE_FUSED=0 (torch elementwise path), SERVE_TIMEOUT (s, default
#      480: the serving process is killed past it; the runs it wrote still come back),
#      REPEAT (config stems served a second time, as <stem>_repeat: the engine's run-to-run
#      spread, `kvsched validate --repeat`), SERVED_STEPS_POOL (pages: after the runs, whole decode
#      steps on the served batches with a pool that size, engine.check --only decode_step_served)
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee $OUT/gpu.txt
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a $OUT/gpu.txt
if [ "${SKIP_CHECK:-0}" != 1 ]; then
  python3 -m engine.check --shape llama-3-8b --json $OUT/check_llama3_8b.json 2>&1 | tail -n 60 > $OUT/check.log
  # The check gates the serving runs: a logits error that is not finite or above 5% (bf16
  # through 32 random layers stays under 3%) stops the call before any run is served.
  python3 -m engine.check_gate $OUT/check_llama3_8b.json || exit 1
  [ "${SKIP_FUSED_BENCH:-0}" = 1 ] || python3 -m kernels.fused --bench 2>&1 | tee $OUT/fused_bench.txt
fi
echo "graphs: ${GRAPHS:-all}" | tee $OUT/serve.log
source engine/runs/device_common.sh
log_gpu_clocks $OUT/gpu_clocks.csv
REPEATS=$(repeat_configs) || exit 1
timeout -k 10 ${SERVE_TIMEOUT:-480} python3 -m kvsched.engine_run --graphs ${GRAPHS:-all} ${DURATION:+--duration-s $DURATION} --out-root $OUT/runs ${CONFIGS:-\
  --config engine/runs/configs/seed_1node.yaml --config engine/runs/configs/multi_turn.yaml \
  --config engine/runs/configs/shared_prefix.yaml --config engine/runs/configs/azure_conv.yaml \
  --config engine/runs/configs/overhead_probe.yaml --config engine/runs/configs/host_probe.yaml} $REPEATS \
  2>&1 | tee -a $OUT/serve.log
if [ -n "${SERVED_STEPS_POOL:-}" ]; then
  timeout -k 10 150 python3 -m engine.check --only decode_step_served --pool-pages $SERVED_STEPS_POOL \
    --layouts engine/runs/logs/2026-11-30_served_batches/layouts.json \
    --runs seed_1node multi_turn shared_prefix --json $OUT/decode_step_served_pool.json > $OUT/served_steps.log 2>&1
fi
tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
kill $CLOCKS 2>/dev/null
