"""How far per-request latencies move when the simulation itself moves a little: each workload
simulated twice with the held-out pricing (all three measured terms, the probes' overhead
terms), the second time with the device time scale 0.5% higher, per-request TTFT and the TTFT
distribution compared between the two simulations.

    python engine/runs/ttft_sensitivity.py [RUN ...] [--factor 1.005]

Where a request's first token comes one or two steps after its arrival and arrivals do not wait
for the node (an open loop), a shift far smaller than any measurement's error moves step
boundaries past arrivals, so per-request TTFT changes by a step while the distribution does not:
no simulation of one run can be closer than that, per request, to the run it simulates. A closed
loop keeps its phase (a client sends when its previous request finishes) and barely moves.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import kvsched.validate as validate
from engine.runs import validations  # the probes beside a run, the measured terms


def simulated_ttft(run: validate.EngineRun, requests, num_clients, scale: float):
    """request id -> simulated TTFT (s), with the device time scale set to `scale`."""
    sim, _ = validate.simulate(
        validate._with_gpu(run, {"device_time_scale": scale}), requests, num_clients
    )
    done = sim.first_token_s.notna()
    ttft = (sim.first_token_s - sim.arrival_s)[done]
    return dict(zip(sim.request_id[done].astype(int), ttft, strict=True))


def sensitivity(run_dir: Path, factor: float) -> dict[str, float]:
    terms = validations.MEASURED_TERMS["all"]
    run = validate._pricing(validate.load_engine_run(run_dir), terms)
    requests, num_clients = validate.measured_requests(run)
    probes = [
        validate._pricing(validate.load_engine_run(p), terms)
        for p in validations.probes_for(run_dir)
    ]
    overheads = validate.measured_overheads(validate.probe_samples(probes))
    priced = validate.with_overheads(run, overheads, "the probes (ttft_sensitivity)")
    scale = overheads["device_time_scale"]
    base = simulated_ttft(priced, requests, num_clients, scale)
    moved = simulated_ttft(priced, requests, num_clients, scale * factor)
    ids = sorted(base.keys() & moved.keys())
    a, b = np.array([base[i] for i in ids]), np.array([moved[i] for i in ids])
    rel = np.abs(b - a) / a
    return {
        "requests": len(ids),
        "ttft_median_abs_change": float(np.median(rel)),
        "ttft_p90_abs_change": float(np.percentile(rel, 90)),
        "ttft_p50_change": float(np.median(b) / np.median(a) - 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "runs", nargs="*", default=["seed_1node", "multi_turn", "shared_prefix", "azure_conv"]
    )
    ap.add_argument("--factor", type=float, default=1.005)
    args = ap.parse_args()
    print(
        "| run | requests | TTFT per request: median / p90 change | TTFT distribution p50 change |"
    )
    print("|---|---:|---|---:|")
    for name in args.runs:
        r = sensitivity(validations.RUNS / name, args.factor)
        print(
            f"| {name} | {r['requests']} | {r['ttft_median_abs_change']:.1%} / "
            f"{r['ttft_p90_abs_change']:.1%} | {r['ttft_p50_change']:+.2%} |"
        )


if __name__ == "__main__":
    main()
