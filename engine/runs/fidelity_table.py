"""Print the README's fidelity tables from the committed validation files.

    python engine/runs/fidelity_table.py

One row per engine run: validation.json (kernels only: the step price as calibrated) and
validation_heldout.json (plus the overhead terms measured on the probe run of the same model
and TP), validation_heldout_<term>.json (the same with one measured term on: gpu.shared_page_reads:
l2, gpu.ragged_decode: measured, gpu.prefill_batch: measured; `all`: the three;
`all_host`: the three with the host's measured speed replayed); then the steps' host time, measured and as priced by the held-out terms. Numbers are the files' own; nothing is
recomputed here.
"""

from __future__ import annotations

import json
from pathlib import Path

RUNS = Path(__file__).resolve().parent


def _pct(v) -> str:
    return "-" if v is None else f"{v:.1%}"


def _signed(v) -> str:
    return "-" if v is None else f"{v:+.1%}"


def _serving_cells(r: dict) -> str:
    """TTFT, TPOT, E2E, throughput and the TTFT distribution's cells of a result."""
    return (
        f"{_pct(r['ttft_median_abs_err'])} / {_pct(r['ttft_p90_abs_err'])} | "
        f"{_pct(r['tpot_median_abs_err'])} / {_pct(r['tpot_p90_abs_err'])} | "
        f"{_pct(r['e2e_median_abs_err'])} | {_pct(r['throughput_abs_err'])} | "
        f"{_signed(r.get('ttft_p50_rel_err'))} / {_signed(r.get('ttft_p90_rel_err'))} |"
    )


def row(name: str, r: dict) -> str:
    return (
        f"| {name} | {r['replayed_steps']} | {r['cached_tokens_mismatch']} / "
        f"{r['step_composition_mismatch']} | {_pct(r['step_time_median_abs_err'])} / "
        f"{_pct(r['step_time_p90_abs_err'])} | {_serving_cells(r)}"
    )


HEADER = (
    "| run | steps | replay: cached-token / step mismatches | step time med / p90 | "
    "TTFT med / p90 | TPOT med / p90 | E2E med | throughput | TTFT distribution p50 / p90 |\n"
    "|---|---:|---|---|---|---|---:|---:|---|"
)


def repeat_row(name: str, r: dict) -> str:
    """The engine against its own repeat (no step times: two runs' steps do not pair up)."""
    return f"| {name}: engine vs its repeat | | | | {_serving_cells(r)}"


def _ms(v) -> str:
    return "-" if v is None else f"{v * 1e3:.2f}"


def host_row(name: str, r: dict) -> str:
    """The steps' host part (off the GPU clock, plus the loop's gap): measured / as priced."""
    cells = [
        f"{_ms(r[f'host_{kind}_step_measured_s'])} / {_ms(r[f'host_{kind}_step_priced_s'])}"
        for kind in ("decode", "chunk")
    ]
    return f"| {name} | {cells[0]} | {cells[1]} |"


def main() -> None:
    for kind, label in (
        ("validation.json", "kernels only"),
        ("validation_heldout.json", "held out"),
        ("validation_heldout_l2.json", "held out, shared page reads priced through L2"),
        ("validation_heldout_ragged.json", "held out, ragged decode batches priced as measured"),
        ("validation_heldout_prefill.json", "held out, a step's prefill chunks as one launch"),
        ("validation_heldout_all.json", "held out, all three measured terms"),
        (
            "validation_heldout_all_host.json",
            "held out, all three, the host's measured speed replayed (runs since session 11)",
        ),
    ):
        print(f"\n{label} ({kind}):\n{HEADER}")
        for path in sorted(RUNS.glob(f"*/{kind}")):
            result = json.loads(path.read_text())
            print(row(path.parent.name, result))
            if "repeat" in result:
                print(repeat_row(path.parent.name, result["repeat"]))
    print(
        "\nhost time per step, median ms, measured / priced by the held-out terms "
        "(validation_heldout.json; a chunk step's priced part includes the device fit's fixed "
        "extra, which gpu.prefill_step_overhead_s holds with the host's):\n"
        "| run | decode-only step | step with a chunk |\n|---|---|---|"
    )
    for path in sorted(RUNS.glob("*/validation_heldout.json")):
        print(host_row(path.parent.name, json.loads(path.read_text())))


if __name__ == "__main__":
    main()
