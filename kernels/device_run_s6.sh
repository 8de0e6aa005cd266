#!/usr/bin/env bash
# Issue 13 device calls of session 6 (GPU machine; run from a clean export of the committed
# tree): OUT=dir [BUDGET=s] bash kernels/device_run_s6.sh sweep|final
# Session 6's question: the gathered (paged) K/V loads were pipelined only one tile ahead (the
# Triton 3.6 pipeliner splits num_stages - 1 between the block-table load and the K/V loads it
# feeds: (3 - 1) // 2 = 1), so each K tile was issued right before it was waited on. num_stages 5
# gives the K/V loads two tiles of lead (kernels/README.md, session 6).
#   sweep: 1. kernels.bench --decode-sweep --sweep-sdpa: decode pipeline depth (num_stages,
#             block_n) on the target shapes (with SDPA), 1 x 32K, 1 x 128K, seed mix
#          2. kernels.bench_prefill --tune-only: prefill classes at num_stages 3 vs 5/7
#          3. kernels.bench_prefill --suite prefill: target rows, defaults and num_stages 5
#          4. kernels.bench_prefill --suite cascade --cascade-variants: prefix pass / tails depth
#   final: 1. GPU tests (subset)
#          2. kernels.bench_prefill --tune-only: "tiles" and "split" (call 2 also tried poly_exp2
#             2/4 and 2)
#          3. the class configs to calibrate with: a candidate only if > 1% faster (geo-mean)
#          4. kernels.calibrate --parts prefill --fidelity 30 --fidelity-extra 12 (those configs)
#          5. kernels.bench_prefill: prefill target rows + cascade (those configs)
#   (poly_exp2 was removed after call 2, measured slower, and its candidates with it.)
# Outputs: run.log and the JSON files named below.
mode=${1:-sweep}
. "$(dirname "$0")/device_budget.sh"
device_start 290
tests="tests/kernels/test_paged_decode.py tests/kernels/test_paged_prefill.py tests/kernels/test_cascade_decode.py"
if [ "$mode" = sweep ]; then
  step "decode sweep: pipeline depth (SDPA on the uniform shapes)"
  timeout "$(left 80 200)" python3 -m kernels.bench --out "$OUT/bench_decode_sweep.json" \
    --sweep-sdpa --decode-sweep '[{}, {"num_stages": 5}, {"num_stages": 5, "block_n": 32},
      {"num_stages": 7, "block_n": 32}, {"num_stages": 5, "fused_combine": false},
      {"num_stages": 5, "programs_per_sm": 4}, {"num_stages": 5, "min_split_tokens": 1024}]' \
    2>&1 | tee -a "$log"
  step "prefill classes: num_stages 3 vs 5/7"
  B='"num_warps": 8, "lazy_rescale": true'
  timeout "$(left 120 80)" python3 -m kernels.bench_prefill --tune-only --tune-budget 240 \
    --out "$OUT/bench_prefill_tune.json" \
    --tune-shapes '{"tiles": [[0, 2048], [0, 8192], [512, 2048], [8192, 2048]],
      "split": [[32768, 16], [32768, 64], [8192, 16]], "split_small": [[16384, 2], [32768, 4]]}' \
    --candidates "{\"tiles\": [{\"block_n\": 128, $B, \"num_stages\": 3, \"warp_specialize\": true},
      {\"block_n\": 128, $B, \"num_stages\": 5}, {\"block_n\": 64, $B, \"num_stages\": 7},
      {\"block_n\": 128, \"num_warps\": 8, \"num_stages\": 5}],
      \"split\": [{\"block_n\": 128, $B, \"num_stages\": 3}, {\"block_n\": 128, $B, \"num_stages\": 5},
      {\"block_n\": 64, $B, \"num_stages\": 7}],
      \"split_small\": [{\"block_n\": 128, \"num_warps\": 4, \"num_stages\": 3},
      {\"block_n\": 128, \"num_warps\": 4, \"num_stages\": 5}]}" 2>&1 | tee -a "$log"
  step "prefill target rows: defaults, then every class at num_stages 5"
  timeout "$(left 25 55)" python3 -m kernels.bench_prefill --no-sdpa --suite prefill \
    --out "$OUT/bench_prefill_s3.json" 2>&1 | tee -a "$log"
  timeout "$(left 25 30)" python3 -m kernels.bench_prefill --no-sdpa --suite prefill \
    --launch-configs '{"tiles": {"num_stages": 5, "warp_specialize": false},
      "split": {"num_stages": 5}, "split_small": {"num_stages": 5}}' \
    --out "$OUT/bench_prefill_s5.json" 2>&1 | tee -a "$log"
  step "cascade variants on the seed mix"
  timeout "$(left 30 0)" python3 -m kernels.bench_prefill --suite cascade \
    --out "$OUT/bench_cascade.json" --cascade-variants '[[{}, {}], [{"num_stages": 5}, {}],
      [{}, {"num_stages": 5}], [{"num_stages": 5}, {"num_stages": 5}]]' 2>&1 | tee -a "$log"
  step "done"
  exit 0
fi
step "pytest (GPU): prefill (exp2 on the FMA pipe, splits), cascade (subset)"
timeout "$(left 50 250)" python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_paged_prefill.py \
  tests/kernels/test_cascade_decode.py -k "poly or loop_variants or split or plan or gqa or one_token or (cascade and not random)" \
  2>&1 | tail -n 10 | tee -a "$log"
step "prefill: exp2 split between MUFU and FMA pipe (tiles), split class"
T='"block_n": 128, "num_warps": 8, "num_stages": 3, "warp_specialize": true, "lazy_rescale": true'
S='"block_n": 128, "num_warps": 8, "num_stages": 5, "lazy_rescale": true'
timeout "$(left 90 160)" python3 -m kernels.bench_prefill --tune-only --tune-budget 200 \
  --out "$OUT/bench_prefill_tune.json" \
  --tune-shapes '{"tiles": [[0, 2048], [0, 8192], [512, 2048], [8192, 2048], [32768, 2048]],
    "split": [[32768, 16], [32768, 64], [8192, 16]]}' \
  --candidates "{\"tiles\": [{$T}], \"split\": [{$S}]}" 2>&1 | tee -a "$log"
step "choose: a candidate replaces its class default only if > 1% faster (geo-mean)"
python3 - "$OUT/bench_prefill_tune.json" "$OUT/prefill_launch.json" <<'PY' 2>&1 | tee -a "$log"
import json, math, sys
trials = json.load(open(sys.argv[1]))["trials"]
keys = ("block_n", "num_warps", "num_stages", "warp_specialize", "lazy_rescale")
chosen = {}
for cls in ("tiles", "split"):
    rows = [t for t in trials if t["class"] == cls and "ms" in t]
    if not rows:
        continue
    score = [sum(math.log(v) for v in t["ms"].values()) / len(t["ms"]) for t in rows]
    best = min(range(len(rows)), key=score.__getitem__)
    pick = best if score[best] < score[0] + math.log(0.99) else 0
    chosen[cls] = {k: rows[pick][k] for k in keys if k in rows[pick]}
    print(cls, [round(math.exp(s), 4) for s in score], "->", chosen[cls])
json.dump(chosen, open(sys.argv[2], "w"), indent=1)
PY
step "calibrate prefill + fidelity 30 + 12 (chosen launch configs)"
cp kernels/calibration/h200.json kernels/calibration/h200_fidelity.json "$OUT/"
timeout "$(left 150 35)" python3 -m kernels.calibrate --parts prefill \
  --prefill-launch-configs "$OUT/prefill_launch.json" --fidelity 30 --fidelity-extra 12 \
  --out "$OUT/h200.json" --fidelity-out "$OUT/h200_fidelity.json" 2>&1 | tee -a "$log"
step "prefill target rows + cascade (chosen launch configs)"
timeout "$(left 35 0)" python3 -m kernels.bench_prefill --no-sdpa --out "$OUT/bench_prefill.json" \
  --launch-configs "$OUT/prefill_launch.json" 2>&1 | tee -a "$log"
step "done"
