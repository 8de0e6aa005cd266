"""Kernel tests run the real Triton kernels: on the GPU when there is one, else on CPU under
TRITON_INTERPRET=1 (set here, before any test module imports triton)."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Device runs may test launch configs before they are the defaults (kernels/device_run_s8.sh),
# applied before any test runs: KVSCHED_TEST_PREFILL_LAUNCH, a JSON object of per-class prefill
# launch configs (kernels.paged_prefill.set_prefill_launch_configs); KVSCHED_TEST_GLUON_KNOBS, a
# JSON object of kernels.gluon_prefill module knobs (WS_MAX_STAGES, PS_READY_LAG, ...).
if os.environ.get("KVSCHED_TEST_PREFILL_LAUNCH"):
    import json

    from kernels.paged_prefill import set_prefill_launch_configs

    set_prefill_launch_configs(json.loads(os.environ["KVSCHED_TEST_PREFILL_LAUNCH"]))
if os.environ.get("KVSCHED_TEST_GLUON_KNOBS"):
    import json

    from kernels import gluon_prefill

    for _name, _value in json.loads(os.environ["KVSCHED_TEST_GLUON_KNOBS"]).items():
        if not hasattr(gluon_prefill, _name):
            raise ValueError(f"kernels.gluon_prefill has no knob {_name!r}")
        setattr(gluon_prefill, _name, _value)
