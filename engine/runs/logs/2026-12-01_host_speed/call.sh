# Lead call L1 (session 11): does the one-H200 VM's host run at two speeds, and does pinning the
# engine to two vCPUs remove it? 1) a fixed pure-Python workload timed over time (unpinned,
# pinned, all 16 vCPUs at once) with steal time; 2) the engine unpinned, then pinned to vCPUs 4-5
# (taskset), each serving host_probe, multi_turn and multi_turn again.
# Run from a snapshot of HEAD (08ffd33, 2026-12-01 04:06 UTC, nvidia-h200) carried as .lead_tree; the host-speed script is this directory's hostspeed.py.
set -u
cd .lead_tree
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1
(lscpu; uptime; nproc; cat /proc/stat | head -1) > $OUT/cpu.txt
SECS=0.6 python3 engine/runs/logs/2026-12-01_host_speed/hostspeed.py $OUT > $OUT/hostspeed.txt 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv > $OUT/gpu.txt
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> $OUT/gpu.txt
source engine/runs/device_common.sh
log_gpu_clocks $OUT/gpu_clocks.csv
C=engine/runs/configs
cp $C/multi_turn.yaml /tmp/multi_turn_repeat.yaml
for mode in unpinned pinned; do
  PIN=""; [ $mode = pinned ] && PIN="taskset -c 4,5"
  head -1 /proc/stat > $OUT/stat_before_$mode.txt
  timeout -k 10 150 $PIN python3 -m kvsched.engine_run --graphs all --duration-s 45 --out-root $OUT/runs_$mode \
    --config $C/host_probe.yaml --config $C/multi_turn.yaml --config /tmp/multi_turn_repeat.yaml > $OUT/serve_$mode.log 2>&1
  echo "rc $?" >> $OUT/serve_$mode.log
  head -1 /proc/stat > $OUT/stat_after_$mode.txt
done
kill $CLOCKS 2>/dev/null
cd $OUT && tar czf runs.tgz runs_unpinned runs_pinned stat_*.txt cpu.txt gpu_clocks.csv && rm -rf runs_unpinned runs_pinned stat_*.txt cpu.txt gpu_clocks.csv
ls $OUT
