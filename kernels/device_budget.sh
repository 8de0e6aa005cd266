# Sourced by the kernels' device scripts (kernels/device_run_*.sh): a step budget and the header
# every call's log starts with. The caller sets t0 (start, epoch s), budget (s) and log (file),
# or calls device_start.

# A call's start: strict variables, NVLink multicast off (KINDS.md), t0, budget ($BUDGET, else
# $1 s), log ($OUT/run.log), the header and the snapshot's commit line in the log.
device_start() {
  set -u
  export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  t0=$(date +%s)
  budget=${BUDGET:-$1}
  log="$OUT/run.log"
  device_header
  cat SNAPSHOT 2>/dev/null | tee -a "$log"
}

# Seconds to give a step: min(wanted, what the budget has left minus a reserve), at least 1.
left() {
  local want=$1 reserve=${2:-0} rem
  rem=$((budget - ($(date +%s) - t0) - reserve))
  [ "$rem" -lt "$want" ] && want=$rem
  [ "$want" -lt 1 ] && want=1
  echo "$want"
}

# A step's heading in the log: UTC time and seconds since t0.
step() { echo "### $(date -u +%H:%M:%S) +$(($(date +%s) - t0))s $*" | tee -a "$log"; }

# The device and the versions the call ran on.
device_header() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv 2>&1 | tee -a "$log"
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())" 2>&1 | tee -a "$log"
}
