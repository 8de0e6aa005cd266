# Round 11 on one H200 (session 12): the logits check on session 12's kernels (d5aa8d2's prefill
# default: few-token split tiles padded to loop 2's 128 rows), then both probes and the four
# workloads at 45 s, each workload served a second time (_repeat), host_speed.csv in every run.
# Run at bd46a70 (session 12 kernels and tables), 2026-12-01 08:00-08:08 UTC, nvidia-h200, 434 s wall.
set -u
(lscpu; uptime; nproc) > $OUT/cpu.txt
echo "SNAPSHOT $(cat SNAPSHOT)" > $OUT/snapshot.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
timeout 100 python3 -m engine.check --shape llama-3-8b --json $OUT/check_llama3_8b.json 2>&1 | tail -n 60 > $OUT/check.log
python3 -m engine.check_gate $OUT/check_llama3_8b.json >> $OUT/check.log 2>&1; echo "gate rc $?" >> $OUT/check.log
C=engine/runs/configs
SKIP_CHECK=1 SERVE_TIMEOUT=450 DURATION=45 REPEAT="seed_1node multi_turn shared_prefix azure_conv" CONFIGS="--config $C/overhead_probe.yaml --config $C/host_probe.yaml --config $C/seed_1node.yaml --config $C/multi_turn.yaml --config $C/shared_prefix.yaml --config $C/azure_conv.yaml" bash engine/runs/device_run.sh > $OUT/device_run.log 2>&1
echo "device_run rc $?" >> $OUT/device_run.log
