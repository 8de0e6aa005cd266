"""Write the committed fidelity files of the engine runs under engine/runs/ (what
tests/app/test_engine_runs.py recomputes and compares).

    python engine/runs/validations.py [RUN ...]

Per run: validation.json (`kvsched validate RUN`: the kernels as calibrated). Per workload run
and per repeat (not a probe): validation_heldout.json (`--overhead-from` the probes of the same
model and TP), and validation_heldout_<term>.json (the same with one measured term on: l2,
ragged, prefill; `all`: all three; a repeat only `all`). A run with a repeat beside it
(`<run>_repeat/`, the same config served again in the same device call) carries the engine's
run-to-run errors (`--repeat`). Where the run and its probes recorded the host's speed
(host_speed.csv, since session 11): validation_heldout_all_host.json, all three terms with the
host's measured speed replayed (`--host-speed`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kvsched.validate import validate

RUNS = Path(__file__).resolve().parent
MEASURED_TERMS = {
    "l2": {"shared_page_reads": "l2"},
    "ragged": {"ragged_decode": "measured"},
    "prefill": {"prefill_batch": "measured"},
    # every measured term at once: one pricing for every workload
    "all": {"shared_page_reads": "l2", "ragged_decode": "measured", "prefill_batch": "measured"},
}


def measured_runs() -> list[Path]:
    return sorted(p.parent.parent for p in RUNS.glob("*/engine/steps.csv"))


PROBES = ("overhead_probe", "host_probe")  # engine/runs/configs/<probe>.yaml


def probes_for(run_dir: Path) -> list[Path]:
    """The probe runs of the same model and TP served in the same device call (configs
    overhead_probe.yaml and host_probe.yaml; at TP 2 article70b_tp2_<probe>.yaml), those present."""
    prefix = "article70b_tp2_" if run_dir.name.startswith("article70b_tp2") else ""
    names = [prefix + probe for probe in PROBES]
    return [RUNS / name for name in names if (RUNS / name / "engine" / "steps.csv").is_file()]


def repeat_for(run_dir: Path) -> Path | None:
    """The same config served again in the same call, if there is one."""
    repeat = run_dir.with_name(run_dir.name + "_repeat")
    return repeat if (repeat / "engine" / "steps.csv").is_file() else None


def has_host_speed(run_dir: Path) -> bool:
    """The run and its probes recorded the host's speed (engine/host_probe.py)."""
    runs = [run_dir, *probes_for(run_dir)]
    return all((r / "engine" / "host_speed.csv").is_file() for r in runs)


def terms_for(run_dir: Path) -> dict[str, dict[str, str]]:
    """The measured-term variants a workload run is judged with (a repeat: all three only)."""
    if run_dir.name.endswith("_repeat"):
        return {"all": MEASURED_TERMS["all"]}
    return MEASURED_TERMS


def is_workload(run_dir: Path) -> bool:
    """Not a probe. A repeat is judged like its workload: its held-out errors beside the
    workload's show how far the metrics themselves move from one run of a config to the next."""
    return not any(name in run_dir.name for name in PROBES)


def write(result: dict, path: Path) -> None:
    """The result as the committed file (the run named from the repository root, not by this
    machine's path)."""
    result = {**result, "run": str(path.parent.relative_to(RUNS.parents[1]))}
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{path.relative_to(RUNS)}: step {_num(result['step_time_median_abs_err'])}, TTFT "
          f"{_num(result['ttft_median_abs_err'])} / {_num(result['ttft_p90_abs_err'])}")  # fmt: skip


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main() -> None:
    runs = [RUNS / name for name in sys.argv[1:]] or measured_runs()
    for run_dir in runs:
        repeat = repeat_for(run_dir)
        write(validate(run_dir, repeat=repeat)[0], run_dir / "validation.json")
        if not is_workload(run_dir):
            continue
        probes = probes_for(run_dir)
        if not probes:
            raise SystemExit(f"{run_dir.name}: no probe run of its model and TP beside it")
        write(validate(run_dir, probes, repeat=repeat)[0], run_dir / "validation_heldout.json")
        for name, terms in terms_for(run_dir).items():
            result = validate(run_dir, probes, terms, repeat)[0]
            write(result, run_dir / f"validation_heldout_{name}.json")
        if has_host_speed(run_dir):
            result = validate(run_dir, probes, MEASURED_TERMS["all"], repeat, host_speed=True)[0]
            write(result, run_dir / "validation_heldout_all_host.json")


if __name__ == "__main__":
    main()
