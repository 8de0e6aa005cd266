"""Choose a step price: the calibrated tables when the GPU's file has them, else the roofline."""

from __future__ import annotations

from pathlib import Path

from sim.config import ConfigError, GpuConfig, ModelConfig
from sim.latency.base import LatencyModel, OverheadTerms, StepOverhead
from sim.latency.calibrated import calibrated_latency_for
from sim.latency.roofline import RooflineLatency

# The calibration files are data that kernels/ writes; sim reads the file, never the package.
CALIBRATION_DIR = Path(__file__).resolve().parents[2] / "kernels" / "calibration"


def make_latency_model(model: ModelConfig, gpu: GpuConfig, tp: int) -> LatencyModel:
    """Calibrated tables when the GPU's calibration file has this model and TP; else the roofline;
    plus what the GPU's measured overhead terms add (sim.latency.base.StepOverhead), if any."""
    calibrated = calibrated_latency_for(model, gpu, tp, CALIBRATION_DIR)
    measured = (
        gpu.shared_page_reads == "l2"
        or gpu.ragged_decode == "measured"
        or gpu.prefill_batch == "measured"
    )
    if calibrated is None and measured:
        raise ConfigError(
            "gpu.shared_page_reads: l2, gpu.ragged_decode: measured and gpu.prefill_batch: "
            "measured need a calibration file "
            f"with a table for {model.name} at tp {tp} (gpu.calibration); this GPU has none"
        )
    priced = calibrated if calibrated is not None else RooflineLatency(model, gpu, tp)
    terms = overhead_terms(gpu)
    if terms == OverheadTerms():
        return priced
    return StepOverhead(priced, terms, graph_max_tokens=gpu.mixed_graph_max_tokens)


def overhead_terms(gpu: GpuConfig) -> OverheadTerms:
    """The GPU's measured overhead terms (`gpu.*_overhead_s`, floors, device time scale)."""
    return OverheadTerms(
        overhead_s=gpu.step_overhead_s,
        prefill_extra_s=gpu.prefill_step_overhead_s,
        per_token_s=gpu.token_overhead_s,
        mixed_floor_s=gpu.mixed_step_floor_s,
        per_decode_s=gpu.decode_overhead_s,
        eager_floor_s=gpu.eager_step_floor_s,
        mixed_decode_s=gpu.mixed_decode_overhead_s,
        per_chunk_s=gpu.chunk_overhead_s,
        per_context_s=gpu.context_overhead_s,
        host_token_s=gpu.host_token_overhead_s,
        device_scale=gpu.device_time_scale,
        per_kv_s=gpu.decode_kv_overhead_s,
    )
