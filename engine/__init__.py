"""GPU executor: a random-weight Llama-style GQA model over a real paged KV pool (issue 14).

Runs on a GPU machine with torch, triton and numpy alone (`shape`, `weights`, `kv_pool`,
`attention`, `model`, `reference`); `runner` and `driver` add sim's scheduler and KV manager.
"""

import os

import torch

# Without a GPU the kernels run under Triton's interpreter. It is chosen when `triton.jit`
# decorates a function, so it must be set before anything (sim, policies, torch extensions)
# imports triton: here, the first engine module any entry point loads.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
