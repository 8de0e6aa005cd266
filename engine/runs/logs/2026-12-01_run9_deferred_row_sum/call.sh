# Round 9 on one H200: the logits check, six runs (both probes, four workloads), then the
# ragged-batch table with the kernel that served them.
set -u
(lscpu; uptime; nproc) > $OUT/cpu.txt
C=engine/runs/configs
SKIP_FUSED_BENCH=1 SERVE_TIMEOUT=320 CONFIGS="--config $C/overhead_probe.yaml --config $C/host_probe.yaml --config $C/seed_1node.yaml --config $C/multi_turn.yaml --config $C/shared_prefix.yaml --config $C/azure_conv.yaml" bash engine/runs/device_run.sh > $OUT/device_run.log 2>&1
echo "device_run rc $?" >> $OUT/device_run.log
export PYTHONPATH=/tmp/site:$PWD
T=$OUT/tables; mkdir -p $T
Q="python3 -m engine.check --only"
{
date; timeout 50 $Q decode_ragged --json $T/decode_ragged.json > $T/log_ragged.txt 2>&1; echo "ragged rc $?"
date; timeout 30 $Q decode_ragged --means 512 1024 --ragged-batches 2 4 8 16 32 --json $T/decode_ragged_short.json > $T/log_ragged_short.txt 2>&1; echo "ragged_short rc $?"
date
} > $T/times.txt 2>&1
cd $OUT && tar czf round9.tgz --exclude=round9.tgz . && find . -mindepth 1 ! -name round9.tgz ! -name device_run.log -delete
