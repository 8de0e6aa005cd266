# The llama-3-8b logits check on round 10's kernels (6b29cdb's prefill split combine default):
# Run at f2325e5 (its kernels are round 10's, 6b29cdb), 2026-12-01 05:08 UTC, nvidia-h200, 50 s wall.
# engine.check against plain torch, a prefix hit against computing from scratch.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.txt
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> $OUT/gpu.txt
timeout 400 python3 -m engine.check --shape llama-3-8b --json $OUT/check_llama3_8b.json 2>&1 | tail -n 60 > $OUT/check.log
python3 -m engine.check_gate $OUT/check_llama3_8b.json >> $OUT/check.log 2>&1; echo "gate rc $?" >> $OUT/check.log
