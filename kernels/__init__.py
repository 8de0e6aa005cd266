"""Triton paged-attention kernels, their plain-torch reference, the H200 bench and calibration.

Importing this package is cheap on purpose: torch and triton are imported only by the
submodules (`kernels.paged_decode`, `kernels.bench`, ...), so the simulator and CI paths that
only read `kernels/calibration/*.json` never pay for them.
"""

from pathlib import Path

CALIBRATION_DIR = Path(__file__).resolve().parent / "calibration"

__all__ = ["CALIBRATION_DIR"]
