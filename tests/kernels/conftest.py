"""Kernel tests run the real Triton kernels: on the GPU when there is one, else on CPU under
TRITON_INTERPRET=1 (set here, before any test module imports triton)."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Device runs may test launch configs before they are the defaults: a JSON object of per-class
# prefill launch configs (kernels.paged_prefill.set_prefill_launch_configs) in this variable is
# applied before any test runs (kernels/device_run_s8.sh).
if os.environ.get("KVSCHED_TEST_PREFILL_LAUNCH"):
    import json

    from kernels.paged_prefill import set_prefill_launch_configs

    set_prefill_launch_configs(json.loads(os.environ["KVSCHED_TEST_PREFILL_LAUNCH"]))
