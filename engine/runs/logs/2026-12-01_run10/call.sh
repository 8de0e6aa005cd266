# Round 10 on one H200 (session 11): both probes and the four workloads at 45 s, each workload
# served a second time (_repeat) in the same process; every run carries host_speed.csv
# (engine/host_probe.py). Engine compute as round 9's (12c2d88's kernels); no logits check
# (round 9's passed on the same compute code).
set -u
(lscpu; uptime; nproc) > $OUT/cpu.txt
C=engine/runs/configs
SKIP_CHECK=1 SERVE_TIMEOUT=545 DURATION=45 REPEAT="seed_1node multi_turn shared_prefix azure_conv" CONFIGS="--config $C/overhead_probe.yaml --config $C/host_probe.yaml --config $C/seed_1node.yaml --config $C/multi_turn.yaml --config $C/shared_prefix.yaml --config $C/azure_conv.yaml" bash engine/runs/device_run.sh > $OUT/device_run.log 2>&1
echo "device_run rc $?" >> $OUT/device_run.log
