set -u
L=engine/runs/logs/2026-12-01_served_batches_r8/layouts_round8_ids.json
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt
python -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__,'cuda',torch.version.cuda)" >> $OUT/gpu.txt
(lscpu | head -20; nproc) > $OUT/cpu.txt
C="python -m engine.check --only"
{
date; timeout 170 $C decode_served --layouts $L --json $OUT/decode_served_r8.json > $OUT/log_served.txt 2>&1; echo "served rc $?"
date; timeout 150 $C decode_shared_pages --json $OUT/decode_shared_pages_table.json > $OUT/log_table.txt 2>&1; echo "table rc $?"
date; timeout 80 $C decode_shared_pages --prefixes 1024 2048 4096 --batches 8 16 32 64 --tails 1024 2048 --json $OUT/decode_shared_pages_tails_1024_2048.json > $OUT/log_tails_1024_2048.txt 2>&1; echo "t1k rc $?"
date; timeout 100 $C decode_shared_pages --prefixes 512 1024 2048 4096 --batches 8 16 32 64 128 --tails 2048 4096 --json $OUT/decode_shared_pages_long_tails.json > $OUT/log_long_tails.txt 2>&1; echo "t2k rc $?"
date; timeout 80 $C decode_shared_pages --prefixes 1024 2048 4096 --batches 8 16 32 64 --tails 6144 10240 --json $OUT/decode_shared_pages_tails_6144_10240.json > $OUT/log_tails_6144_10240.txt 2>&1; echo "t6k rc $?"
date; timeout 130 $C decode_step_served --pool-pages 49490 --layouts $L --json $OUT/decode_step_served_r8.json > $OUT/log_step_served.txt 2>&1; echo "steps rc $?"
date
} > $OUT/times.txt 2>&1
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv >> $OUT/gpu.txt
