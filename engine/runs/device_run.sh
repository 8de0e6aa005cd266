#!/bin/bash
# One device call (nvidia-h200): the llama-3-8b logits check, then the serving runs back to back.
# carry: .whl (pydantic, pydantic_core, annotated_types, typing_inspection, simpy, typing_extensions)
#        .engine_data (the derived Azure slice)
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee $OUT/gpu.txt
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a $OUT/gpu.txt
if [ "${SKIP_CHECK:-0}" != 1 ]; then
  python3 -m engine.check --shape llama-3-8b --json $OUT/check_llama3_8b.json 2>&1 | tee $OUT/check.log
fi
# Serve with decode CUDA graphs only if the check found graph logits equal to eager ones (within
# bf16 rounding through 32 layers: eager vs the reference differs by 2.5% at llama-3-8b), unless
# GRAPHS is set.
GRAPHS=${GRAPHS-$(python3 -c "import json; d = json.load(open('$OUT/check_llama3_8b.json'))['decode_graphs']; \
print('--graphs' if all(v['rel_err'] < 5e-2 for k, v in d.items() if k[0] == 'b') else '')" 2>/dev/null)}
echo "serve flags: ${GRAPHS:-eager}" | tee $OUT/serve.log
python3 -m kvsched.engine_run $GRAPHS --out-root $OUT/runs ${CONFIGS:-\
  --config engine/runs/configs/seed_1node.yaml --config engine/runs/configs/multi_turn.yaml \
  --config engine/runs/configs/shared_prefix.yaml --config engine/runs/configs/azure_conv.yaml} \
  2>&1 | tee -a $OUT/serve.log
tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
