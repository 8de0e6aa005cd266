"""Latency models: the roofline, the GPU-calibrated tables, and the factory that picks one."""

from sim.latency.base import LatencyModel, StepOverhead, StepPlan, StepShape
from sim.latency.calibrated import CalibratedLatency
from sim.latency.factory import CALIBRATION_DIR, make_latency_model
from sim.latency.roofline import RooflineLatency

__all__ = [
    "CALIBRATION_DIR",
    "CalibratedLatency",
    "LatencyModel",
    "RooflineLatency",
    "StepOverhead",
    "StepPlan",
    "StepShape",
    "make_latency_model",
]
