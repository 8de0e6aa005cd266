"""The run-directory format's names: what a run writes and what reports/ reads back.

Kept in sim/ (the foundation) so the writer (the application) and the readers (reports/) agree
without importing each other.
"""

from __future__ import annotations

import json

# In every directory kvsched creates: JSON {"created_by": "kvsched", "kind": run|sweep|parent, ...}.
# kvsched replaces or deletes a directory only if this file names the same kind (docs/cli.md).
MARKER = ".kvsched-run"


def marker_text(kind: str, version: str) -> str:
    return json.dumps({"created_by": "kvsched", "kind": kind, "version": version}) + "\n"


def arm_dir_name(arm: str) -> str:
    """Arm names become directory names: keep them to a safe alphabet."""
    return "".join(c if c.isalnum() or c in "+-_." else "_" for c in arm) or "_"


def cell(value):
    """An axis value in a table cell: scalars as they are; null and sections (dicts, lists) as
    JSON text, so a null value ("use the derived default") stays distinct from a missing cell."""
    return (
        json.dumps(value, sort_keys=True)
        if value is None or isinstance(value, dict | list)
        else value
    )
