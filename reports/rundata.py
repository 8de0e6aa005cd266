"""Read run directories back from disk: the only input of reports, comparisons and checks.

A run directory is what `kvsched.experiment.run_experiment` writes (layout in that module's
docstring). Required: `summary.json`; per arm `requests.csv` and `timeseries.csv` when frames are
wanted. Optional: `config.json`, `run_info.json`, `<arm>/config.json`. Anything unreadable raises
ConfigError naming the file, so the CLI exits 2 with one line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from sim.config import ConfigError
from sim.rundir import arm_dir_name


@dataclass(slots=True)
class Arm:
    """One arm of one run: its headline metrics and (when loaded) its per-request and series rows."""

    name: str  # the arm's name in its run
    label: str  # what the report shows ("engine", or "runA/engine" when several runs are shown)
    metrics: dict
    config: dict = field(default_factory=dict)
    requests: pd.DataFrame | None = None
    series: pd.DataFrame | None = None
    evictions: pd.DataFrame | None = (
        None  # optional evictions.csv: evicted pages by prefix position
    )
    _finished: pd.DataFrame | None = field(default=None, init=False, repr=False)

    @property
    def request_rows(self) -> pd.DataFrame:
        """requests.csv of an arm loaded with frames (every report section needs them)."""
        assert self.requests is not None, f"{self.label}: run loaded without frames"
        return self.requests

    @property
    def finished_rows(self) -> pd.DataFrame:
        """The rows of finished requests (the latency plots' input), selected once."""
        if self._finished is None:
            rows = self.request_rows
            self._finished = rows[rows.status == "finished"]
        return self._finished

    @property
    def series_rows(self) -> pd.DataFrame:
        """timeseries.csv of an arm loaded with frames."""
        assert self.series is not None, f"{self.label}: run loaded without frames"
        return self.series


@dataclass(slots=True)
class Run:
    path: Path
    summary: dict
    run_info: dict
    config: dict
    arms: dict[str, Arm]

    @property
    def label(self) -> str:
        return str(self.summary.get("name") or self.path.name)


def read_json(path: Path, what: str, required: bool = True) -> dict:
    if not path.is_file():
        if required:
            raise ConfigError(f"{what}: no such file {path}")
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(
            f"{what}: {path} is not valid JSON ({str(err).splitlines()[0]})"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what}: {path} must hold a JSON object")
    return data


def _read_csv(path: Path, required_columns: list[str]) -> pd.DataFrame:
    if not path.is_file():
        raise ConfigError(f"run directory: no such file {path}")
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError) as err:
        raise ConfigError(
            f"run directory: {path} is not a readable CSV ({str(err).splitlines()[0]})"
        ) from None
    missing = [c for c in required_columns if c not in frame.columns]
    if missing:
        raise ConfigError(f"run directory: {path} lacks column(s) {', '.join(missing)}")
    return frame


def _read_series(path: Path) -> pd.DataFrame:
    """timeseries.csv; an engine run written before the engine sampled one (engine/runs/ up
    to round 3) has none: no rows, and the sections that need them say so."""
    if not path.is_file() and (path.parent / "steps.csv").is_file():
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in REQUIRED_SERIES_COLUMNS})
    return _read_csv(path, REQUIRED_SERIES_COLUMNS)


# Columns every plot relies on; everything else is optional and only adds sections.
REQUIRED_REQUEST_COLUMNS = ["arrival_s", "first_token_s", "finish_s", "prompt_tokens", "status"]
REQUIRED_SERIES_COLUMNS = ["time_s", "node"]


def load_run(path: str | Path, frames: bool = True) -> Run:
    """Read one run directory; `frames=False` reads only the JSON files (enough for check)."""
    path = Path(path)
    if not path.is_dir():
        raise ConfigError(f"run directory: {path} does not exist or is not a directory")
    summary = read_json(path / "summary.json", "run directory")
    arm_metrics = summary.get("arms")
    if not isinstance(arm_metrics, dict) or not arm_metrics:
        raise ConfigError(f"run directory: {path / 'summary.json'} has no arms")
    arms = {}
    for name, metrics in arm_metrics.items():
        arm_dir = path / arm_dir_name(name)
        arm = Arm(
            name=name,
            label=name,
            metrics=metrics if isinstance(metrics, dict) else {},
            config=read_json(arm_dir / "config.json", "run directory", required=False),
        )
        if frames:
            arm.requests = _read_csv(arm_dir / "requests.csv", REQUIRED_REQUEST_COLUMNS)
            arm.series = _read_series(arm_dir / "timeseries.csv")
            if (arm_dir / "evictions.csv").is_file():
                arm.evictions = _read_csv(
                    arm_dir / "evictions.csv", ["prefix_position_from", "evicted_pages"]
                )
        arms[name] = arm
    return Run(
        path=path,
        summary=summary,
        config=read_json(path / "config.json", "run directory", required=False),
        run_info=read_json(path / "run_info.json", "run directory", required=False),
        arms=arms,
    )


def load_runs(paths: list[str | Path], frames: bool = True) -> list[Run]:
    """Several runs in one report: arm labels get the run's name when more than one run is shown."""
    if len(paths) == 1:
        return [load_run(paths[0], frames)]
    runs: list[Run] = []
    for i, p in enumerate(paths):
        run = load_run(p, frames)
        taken = {r.label for r in runs}
        prefix = f"{run.label}/" if run.label not in taken else f"{run.label}#{i + 1}/"
        for arm in run.arms.values():
            arm.label = prefix + arm.name
        runs.append(run)
    return runs


def all_arms(runs: list[Run]) -> list[Arm]:
    return [arm for run in runs for arm in run.arms.values()]
