"""The serving host's measured speed, replayed in a validation (`kvsched validate --host-speed`).

An engine run since session 11 records how long a fixed piece of pure Python took every 20 ms
(engine/host_probe.py, host_speed.csv). The H200 VM's host runs that piece at two speeds, ~1.5-2x
apart, for seconds at a time (engine/runs/host_speed.py), and every step's host part with it;
the simulator prices host work at one speed. With `--host-speed` the validation puts the
measured speed back: the probes' host samples are divided by the speed they ran at (the terms
are then those of the probes' median speed), and each workload step's host price is multiplied
by the speed at its start. Only the host part moves: the GPU's clock and the device terms are
not the host's. This replays the serving machine as measured, as the arrival times are; a
what-if study, which has no measured run, prices at one speed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.config import GpuConfig
from sim.executor import StepExecutor
from sim.latency.base import OverheadTerms
from sim.latency.factory import overhead_terms
from sim.scheduler import Step

WINDOW_S = 0.25  # the speed at t: the median probe within +-WINDOW_S / 2 (~12 samples)


@dataclass(frozen=True)
class HostSpeed:
    """A run's probe samples, smoothed: seconds of the probe at each sample's time."""

    t_s: np.ndarray
    probe_s: np.ndarray  # the window median around each sample

    @classmethod
    def smoothed(cls, t_s: np.ndarray, probe_s: np.ndarray) -> HostSpeed:
        """From the probe's samples (any order; positive seconds)."""
        order = np.argsort(t_s, kind="stable")
        t, probe = t_s[order].astype(np.float64), probe_s[order].astype(np.float64)
        lo = np.searchsorted(t, t - WINDOW_S / 2, side="left")
        hi = np.searchsorted(t, t + WINDOW_S / 2, side="right")
        return cls(t, np.array([np.median(probe[a:b]) for a, b in zip(lo, hi, strict=True)]))

    def at(self, times: np.ndarray | float) -> np.ndarray:
        """The smoothed probe seconds at `times` (the nearest sample's)."""
        times = np.atleast_1d(np.asarray(times, dtype=np.float64))
        right = np.clip(np.searchsorted(self.t_s, times), 0, self.t_s.size - 1)
        left = np.clip(right - 1, 0, self.t_s.size - 1)
        nearer_left = np.abs(times - self.t_s[left]) <= np.abs(self.t_s[right] - times)
        return self.probe_s[np.where(nearer_left, left, right)]


def reference_s(speeds: list[HostSpeed]) -> float:
    """The probe seconds the host terms are stated at: the median over the given runs."""
    return float(np.median(np.concatenate([s.probe_s for s in speeds])))


@dataclass(frozen=True)
class HostPricing:
    """What prices a run's host parts at its measured speed: the speed, the probe seconds the
    host terms are stated at, and the device fit's fixed extra per chunk step (carried by
    `gpu.prefill_step_overhead_s` with the host's, not host work)."""

    speed: HostSpeed
    reference: float
    device_extra_s: float
    exponent: float = 1.0  # host time ~ probe time ** exponent (`host_exponent`)

    def factors(self, times: np.ndarray | float) -> np.ndarray:
        return (self.speed.at(times) / self.reference) ** self.exponent


def host_exponent(speed: np.ndarray, host_s: np.ndarray, num_decode: np.ndarray) -> float:
    """How host time follows the probe: the slope of log(host time) on log(speed) within each
    decode count (decode-only steps: one kind of host work), least squares, refitted once
    without the steps far off it (GC pauses, steps at a speed switch); 1 where the speed never
    moved. Round 10's probes pooled: 0.93; single runs 0.57-1.09 (not all host time is the
    CPU's: syncs, driver calls)."""
    keep = (host_s > 0) & (speed > 0)
    x, y, group = np.log(speed[keep]), np.log(host_s[keep]), num_decode[keep]
    fit = _within_slope(x, y, group)
    if fit is None:
        return 1.0
    slope, residual = fit
    # 5 median absolute residuals, but never under 0.2 (22% off in time): a steep first slope's
    # residuals must not drop the slow steps themselves
    inside = residual <= max(5 * float(np.median(residual)), 0.2)
    refit = _within_slope(x[inside], y[inside], group[inside])
    if refit is not None:
        slope = refit[0]
    return float(np.clip(slope, 0.0, 1.5))


def _within_slope(
    x: np.ndarray, y: np.ndarray, group: np.ndarray
) -> tuple[float, np.ndarray] | None:
    """Least-squares slope of y on x with a mean per group, and each point's absolute
    residual; None where x does not vary within the groups."""
    _, index = np.unique(group, return_inverse=True)
    counts = np.bincount(index)
    x = x - (np.bincount(index, x) / counts)[index]
    y = y - (np.bincount(index, y) / counts)[index]
    spread = float((x * x).sum())
    if spread < 1e-12:
        return None
    slope = float((x * y).sum()) / spread
    return slope, np.abs(y - slope * x)


def host_price_s(
    terms: OverheadTerms,
    num_decode: int,
    chunks: int,
    context: int,
    tokens: int,
    device_extra_s: float,
) -> float:
    """The host part of a step's price: the host terms (`OverheadTerms.host_s`) less the
    device fit's fixed extra (at most what `prefill_extra_s`, gpu.prefill_step_overhead_s,
    holds: the fit clips that term at 0)."""
    host = terms.host_s(num_decode, chunks, context, tokens)
    return host - (min(device_extra_s, terms.prefill_extra_s) if tokens else 0.0)


class HostSpeedExecutor:
    """A node's executor whose steps' host part runs at the measured speed of their start:
    the inner price plus the host price times ((speed / reference) ** exponent - 1).
    Step-by-step only (the cluster runs with `exact_steps`): decode spans price ahead of time,
    at no known start."""

    def __init__(self, inner: StepExecutor, gpu: GpuConfig, host: HostPricing):
        self.inner, self.host = inner, host
        self.terms = overhead_terms(gpu)  # once: run_step is the simulation's per-step path

    def run_step(self, node_id: int, step: Step, now: float) -> float:
        step_s = self.inner.run_step(node_id, step, now)
        factor = float(self.host.factors(now)[0])
        shape = step.shape()
        tokens, chunks, context = (
            sum(shape.prefill_new),
            len(shape.prefill_new),
            sum(shape.prefill_ctx),
        )
        host_s = host_price_s(
            self.terms, shape.num_decode, chunks, context, tokens, self.host.device_extra_s
        )
        return step_s + host_s * (factor - 1.0)
