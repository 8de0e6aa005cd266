# Sourced by device_run.sh and device_run_tp2.sh (bash).

# The GPUs' clocks, temperature and power once a second while the runs serve (a later run on a
# hotter GPU may clock lower: the device time scale is measured per run); $CLOCKS is its pid.
log_gpu_clocks() {
  nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv,nounits -l 1 > "$1" 2>/dev/null &
  CLOCKS=$!
}

# --config arguments serving each config stem of $REPEAT again, under <stem>_repeat: its own
# run directory (kvsched validate --repeat).
repeat_configs() {
  local stem
  for stem in ${REPEAT:-}; do
    cp "engine/runs/configs/$stem.yaml" "/tmp/${stem}_repeat.yaml" || return 1
    printf -- ' --config /tmp/%s_repeat.yaml' "$stem"
  done
}
