# Round 9 on one H200 (the fixed decode kernel): the logits check, then six runs (both probes,
# four workloads) at 45 s each.
set -u
(lscpu; uptime; nproc) > $OUT/cpu.txt
C=engine/runs/configs
SKIP_FUSED_BENCH=1 SERVE_TIMEOUT=300 DURATION=45 CONFIGS="--config $C/overhead_probe.yaml --config $C/host_probe.yaml --config $C/seed_1node.yaml --config $C/multi_turn.yaml --config $C/shared_prefix.yaml --config $C/azure_conv.yaml" bash engine/runs/device_run.sh > $OUT/device_run.log 2>&1
echo "device_run rc $?" >> $OUT/device_run.log
