"""`kvsched.engine_run` at TP 2 end to end on CPU: two processes under torchrun (gloo), rank 0
scheduling and sending every step, both serving the tiny model; the run directory is written
once, by rank 0, and both processes exit cleanly."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import yaml

CONFIG = {
    "name": "engine-tiny-tp2",
    "seed": 0,
    "duration_s": 300,
    "gpu": {"hbm_bytes": 1e6, "hbm_bytes_per_s": 1e12, "bf16_flops_per_s": 1e14,
            "interconnect_bytes_per_s": 1e11},
    "model": {"head_dim": 16, "hidden_size": 64, "intermediate_size": 96, "num_kv_heads": 2,
              "num_layers": 2, "num_q_heads": 4, "vocab_size": 128},
    "node": {"max_num_batched_tokens": 64, "num_gpus": 2, "tp": 2},
    "cluster": {"num_nodes": 1},
    "workload": {"name": "shared_prefix_groups",
                 "params": {"num_clients": 3, "num_groups": 2, "output_tokens": 4,
                            "prompts_per_group": 4, "question_tokens": 9,
                            "system_prompt_tokens": 40}},
}  # fmt: skip


def test_tp2_engine_run_on_cpu(tmp_path):
    config = tmp_path / "tiny_tp2.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    out_root = tmp_path / "runs"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd += ["-m", "kvsched.engine_run", "--config", str(config), "--out-root", str(out_root)]
    cmd += ["--no-warmup", "--graphs", "all"]
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run = out_root / "tiny_tp2"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["arms"]["engine"]["completed"] == 8
    assert json.loads((run / "run_info.json").read_text())["tp"] == 2
    steps = pd.read_csv(run / "engine" / "steps.csv")
    assert len(steps) == summary["arms"]["engine"]["num_steps"] > 0
    assert sorted(p.name for p in out_root.iterdir()) == ["tiny_tp2"]  # nothing else left


def test_tp2_preflight_refuses_a_config_for_one_process(tmp_path):
    """node.tp must be the number of processes: refused before any model is built (exit 2)."""
    config = tmp_path / "tp1.yaml"
    config.write_text(
        yaml.safe_dump({**CONFIG, "node": {**CONFIG["node"], "tp": 1, "num_gpus": 1}})
    )
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd += ["-m", "kvsched.engine_run", "--config", str(config), "--out-root", str(tmp_path / "r")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    assert "node.tp must be the number of processes (2)" in done.stderr
    assert not (tmp_path / "r").exists()
