"""Kernel tests run the real Triton kernels: on the GPU when there is one, else on CPU under
TRITON_INTERPRET=1 (set here, before any test module imports triton)."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
