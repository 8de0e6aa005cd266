"""Build the Azure slice the `azure_conv` engine run replays (not committed: the traces are read
from ../shared/traces, where their licence and formats are documented).

    python engine/runs/azure_slice.py            # writes .engine_data/azure_conv_150s.csv

The first 150 s of AzureLLMInferenceTrace_conv.csv: the rows whose TIMESTAMP is within 150 s of
the first, the header kept, lines copied as they are (613 rows).
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT.parent / "shared" / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
SLICE = ROOT / ".engine_data" / "azure_conv_150s.csv"
WINDOW_S = 150.0


def _time(line: str) -> datetime:
    return datetime.fromisoformat(line.split(",", 1)[0][:26])


def build(trace: Path = TRACE, out: Path = SLICE) -> Path:
    with trace.open(newline="") as f:  # lines as they are (CRLF)
        header = f.readline()
        lines = [header]
        first = None
        for line in f:
            t = _time(line)
            first = first or t
            if (t - first).total_seconds() > WINDOW_S:
                break
            lines.append(line)
    out.parent.mkdir(exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text("".join(lines), newline="")
    tmp.replace(out)
    return out


if __name__ == "__main__":
    if not TRACE.is_file():
        sys.exit(f"error: {TRACE} not found (the traces live in ../shared/traces)")
    print(build())
