"""The simulator's compiled modules (sim/native.py): used only while they match their sources,
and giving the same run files as the sources, byte for byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sim
from sim import holder_table, native
from sim.holder_table import HolderTable
from sim.kv import hashing
from sim.kv.page_slots import TableSlots
from sim.kv.prefix_index import TwoLevelIndex

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def record(tmp_path, monkeypatch):
    """A build record for sources in tmp_path, each module's extension present there."""
    monkeypatch.setattr(native, "ROOT", tmp_path)
    monkeypatch.setattr(native, "RECORD", tmp_path / "native.json")
    monkeypatch.setattr(native, "shared_of", lambda name: tmp_path / f"{name}.so")
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    sources = {}
    for module in native.COMPILED + native.C_EXTENSIONS:
        source = native.source_of(module)
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(f"# {module}\n")
        native.built_of(module).write_bytes(b"")
        sources[module] = native.digest(source)
    (tmp_path / "group__mypyc.so").write_bytes(b"")
    native.RECORD.write_text(json.dumps({"sources": sources, "shared": "group__mypyc"}))
    return tmp_path


def test_a_current_build_is_used(record):
    assert native.read_record()["shared"] == "group__mypyc"


def test_an_edited_source_turns_every_module_to_its_source(record):
    native.source_of("sim.node").write_text("# sim.node, edited\n")
    assert native.read_record() is None


def test_a_missing_extension_or_library_or_a_bad_record_is_not_used(record):
    native.built_of("sim.clock").unlink()
    assert native.read_record() is None
    native.built_of("sim.clock").write_bytes(b"")
    (record / "group__mypyc.so").unlink()
    assert native.read_record() is None
    native.RECORD.write_text("{not json")
    assert native.read_record() is None
    native.RECORD.write_text("[]")
    assert native.read_record() is None


def test_kvsched_pure_turns_it_off(record, monkeypatch):
    monkeypatch.setenv(native.PURE_ENV, "1")
    assert native.read_record() is None
    monkeypatch.setenv(native.PURE_ENV, "0")
    assert native.read_record() is not None


def _run(study: str, out: Path, pure: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != native.PURE_ENV}
    if pure:
        env[native.PURE_ENV] = "1"
    cmd = [sys.executable, "-m", "kvsched.cli", "run", "--config", study, "--out", str(out)]
    cmd += ["--duration", "20", "--no-report", "--quiet", "--workers", "1"]
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)


def _files(run: Path) -> dict[str, bytes]:
    """Every file of the run but run_info.json (wall times)."""
    return {
        str(p.relative_to(run)): p.read_bytes()
        for p in sorted(run.rglob("*"))
        if p.is_file() and p.name != "run_info.json"
    }


# .ci/run sets it: on CI a failed native build must fail here, not skip the comparison below.
REQUIRED = os.environ.get("KVSCHED_REQUIRE_NATIVE") == "1"


def _needs_the_build() -> None:
    if sim.NATIVE:
        return
    if REQUIRED:
        pytest.fail("KVSCHED_REQUIRE_NATIVE=1 but the compiled modules are not in use (make setup)")
    pytest.skip("the compiled modules are not built (make setup)")


def test_the_routing_table_probes_in_c_with_the_build():
    _needs_the_build()
    assert holder_table._C is not None and HolderTable(4)._c is holder_table._C


def test_the_prefix_index_level_1_is_the_c_table_with_the_build():
    _needs_the_build()
    assert isinstance(TwoLevelIndex(8, 4).key_to_page, TableSlots)


def test_page_keys_are_hashed_in_c_with_the_build():
    _needs_the_build()
    assert hashing._C is not None


@pytest.mark.parametrize(
    "study",
    ["baselines/seed_study.yaml", "studies/routing.yaml", "studies/pitfall_refcount_race.yaml"],
)
def test_compiled_and_source_runs_write_the_same_files(study, tmp_path):
    _needs_the_build()
    _run(study, tmp_path / "compiled", pure=False)
    _run(study, tmp_path / "pure", pure=True)
    compiled, pure = _files(tmp_path / "compiled"), _files(tmp_path / "pure")
    assert compiled.keys() == pure.keys() and len(compiled) > 3
    assert [name for name in compiled if compiled[name] != pure[name]] == []
