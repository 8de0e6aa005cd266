# Round 10's decode-only steps, one layer's decode attention timed alone on the H200 (engine.check
# Run at 34f2598 (6b29cdb's decode kernel), 2026-12-01 05:08-05:11 UTC, nvidia-h200, 170 s wall.
# --only decode_served; layouts from `python engine/runs/served_layouts.py
# layouts_round10_ids.json --real-ids`: 30 steps of each run): does the decode table with the
# extended batch grid (22e7dc9: +12, 24, 40, 48, 96) price the served batches, off-grid host-probe
# batches included (round 8's were 7.6% over the table)?
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
L=engine/runs/logs/2026-12-01_served_batches_r10/layouts_round10_ids.json
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt
python3 -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__,'cuda',torch.version.cuda)" >> $OUT/gpu.txt
{ date; timeout 190 python3 -m engine.check --only decode_served --layouts $L --json $OUT/decode_served_r10.json > $OUT/log_served.txt 2>&1; echo "served rc $?"; date; } > $OUT/times.txt 2>&1
