"""Hand-written hostile inputs: paths, output directories, flags, arms, traces, sweeps, reports.

Each case: a setup that writes files into a scratch directory (next to the user's own files),
a command line, and the exit statuses allowed; the contract (fuzz_harness.check_case) is checked
for every case, plus what the case itself expects (an error text, the user's files intact).
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
import yaml
from fuzz_harness import TINY, check_case, make_user_files

RUN = ["run", "--quiet", "--no-report", "--duration", "1"]


def tiny(**fields) -> dict:
    cfg = copy.deepcopy(TINY)
    cfg.update(fields)
    return cfg


def write(root: Path, name: str, data) -> str:
    p = root / name
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        p.write_bytes(data)
    elif isinstance(data, str):
        p.write_text(data)
    else:
        p.write_text(json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data))
    return name


def earlier_run(root: Path, name: str = "out") -> None:
    assert (
        check_case([*RUN, "--config", write(root, "ok.yaml", tiny()), "--out", name], root)[0] == 0
    )


BILLION_LAUGHS = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    + [
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    ]
)

# (id, setup(root) -> argv, allowed exit statuses, text expected in stderr)
CASES = []


def case(name, allowed=(2,), expect=""):
    def register(fn):
        CASES.append(pytest.param(fn, allowed, expect, id=name))
        return fn

    return register


# -- --config ------------------------------------------------------------------------------
@case("config-missing", expect="no such file")
def _(r):
    return [*RUN, "--config", "nope.yaml", "--out", "out"]


@case("config-directory", expect="is a directory")
def _(r):
    (r / "d").mkdir()
    return [*RUN, "--config", "d", "--out", "out"]


@case("config-fifo", expect="not a regular file")
def _(r):
    os.mkfifo(r / "f.yaml")
    return [*RUN, "--config", "f.yaml", "--out", "out"]


@case("config-random-bytes", expect="not a UTF-8")
def _(r):
    return [*RUN, "--config", write(r, "b.yaml", bytes(range(256)) * 3), "--out", "out"]


@case("config-latin1", expect="not a UTF-8")
def _(r):
    return [
        *RUN,
        "--config",
        write(r, "l.yaml", "name: caf\xe9\n".encode("latin-1")),
        "--out",
        "out",
    ]


@case("config-nul-bytes")
def _(r):
    return [*RUN, "--config", write(r, "n.yaml", b"name: a\x00b\n"), "--out", "out"]


@case("config-top-level-list", expect="must be a mapping")
def _(r):
    return [*RUN, "--config", write(r, "l2.yaml", "- 1\n- 2\n"), "--out", "out"]


@case("config-duplicate-yaml-key", expect="duplicate key")
def _(r):
    return [*RUN, "--config", write(r, "d.yaml", "seed: 1\nseed: 2\n"), "--out", "out"]


@case("config-duplicate-nested-key", expect="duplicate key")
def _(r):
    text = "cluster:\n  num_nodes: 1\n  num_nodes: 2\n"
    return [*RUN, "--config", write(r, "d2.yaml", text), "--out", "out"]


@case("config-duplicate-json-key", expect="duplicate key")
def _(r):
    return [*RUN, "--config", write(r, "d.json", '{"seed": 1, "seed": 2}'), "--out", "out"]


@case("config-billion-laughs", expect="aliases")
def _(r):
    return [*RUN, "--config", write(r, "bomb.yaml", BILLION_LAUGHS), "--out", "out"]


@case("config-deep-json")
def _(r):
    return [*RUN, "--config", write(r, "deep.json", "[" * 100_000), "--out", "out"]


@case("config-python-tag", expect="not valid YAML")
def _(r):
    text = "seed: !!python/object/apply:os.system ['true']\n"
    return [*RUN, "--config", write(r, "tag.yaml", text), "--out", "out"]


@case("config-too-large", expect="bound")
def _(r):
    with open(r / "big.yaml", "wb") as f:
        f.truncate(17 * 2**20)  # sparse: refused by size before it is read
    return [*RUN, "--config", "big.yaml", "--out", "out"]


@case("config-bom-is-fine", allowed=(0,))
def _(r):
    return [
        *RUN,
        "--config",
        write(r, "bom.yaml", "\ufeff" + yaml.safe_dump(tiny())),
        "--out",
        "out",
    ]


@case("config-anchors-are-fine", allowed=(0,))
def _(r):
    cfg = tiny()
    del cfg["node"]
    text = "node: &n {num_gpus: 1, tp: 1}\narms: {a: {node: *n}}\n" + yaml.safe_dump(cfg)
    return [*RUN, "--config", write(r, "anc.yaml", text), "--out", "out"]


# -- values ---------------------------------------------------------------------------------
BAD_FIELDS = {
    "num-nodes-true": {"cluster": {"num_nodes": True}},
    "num-nodes-million": {"cluster": {"num_nodes": 1_000_000}},
    "seed-negative": {"seed": -1},
    "seed-huge": {"seed": 2**70},
    "seed-bool": {"seed": True},
    "duration-inf": {"duration_s": float("inf")},
    "duration-nan": {"duration_s": float("nan")},
    "duration-text-inf": {"duration_s": "inf"},
    "sample-interval-tiny": {"sample_interval_s": 1e-7},
    "page-size-bool": {"cache": {"page_size": True}},
    "kv-fraction-nan": {"node": {"kv_memory_fraction": float("nan")}},
    "clients-billion": {"workload": {"name": "seed", "params": {"num_clients": 10**9}}},
    "clients-bool": {"workload": {"name": "seed", "params": {"num_clients": True}}},
    "policy-param-nan": {
        "policies": {"eviction": {"name": "scored", "params": {"half_life_s": float("nan")}}}
    },
    "policy-param-bool": {
        "policies": {"eviction": {"name": "scored", "params": {"half_life_s": True}}}
    },
    "zero-page-pool": {"node": {"num_gpus": 1, "tp": 1, "kv_memory_fraction": None}},
    "arms-collide-slash": {"arms": {"a/b": {}, "a_b": {}}},
    "arms-dotdot": {"arms": {"..": {}}},
    "arms-summary-json": {"arms": {"summary.json": {}}},
    "arms-case-collide": {"arms": {"Fast": {}, "fast": {}}},
    "arms-hidden": {"arms": {".x": {}}},
    "arm-unselected-invalid": {"arms": {"good": {}, "bad": {"cluster": {"num_nodes": 0}}}},
}


def _zero_page_fraction() -> float:
    """A kv_memory_fraction that leaves the weights room but not one page."""
    from sim.config import parse_config

    cfg = parse_config(tiny())
    weights = cfg.model.num_params * cfg.model.dtype_bytes
    return (weights + cfg.model.kv_bytes_per_token) / cfg.gpu.hbm_bytes


BAD_FIELDS["zero-page-pool"]["node"]["kv_memory_fraction"] = _zero_page_fraction()
for _name, _fields in BAD_FIELDS.items():

    def _make(r, fields=_fields, name=_name):
        config = write(r, f"{name}.json", tiny(**fields))
        argv = ["run", "--quiet", "--no-report", "--config", config, "--out", "out"]
        return argv + (["--arms", "good"] if name == "arm-unselected-invalid" else [])

    CASES.append(pytest.param(_make, (2,), "", id=f"value-{_name}"))


# -- flags ----------------------------------------------------------------------------------
for _flag, _value in [
    ("--duration", "nan"),
    ("--duration", "inf"),
    ("--duration", "-1"),
    ("--duration", "1e308"),
    ("--duration", "abc"),
    ("--seed", "-1"),
    ("--seed", "1.5"),
    ("--seed", str(2**64)),
    ("--arms", "nope"),
    ("--arms", "engine,nope"),
]:
    CASES.append(
        pytest.param(
            lambda r, f=_flag, v=_value: [
                "run",
                "--quiet",
                "--no-report",
                "--config",
                write(r, "ok.yaml", tiny()),
                "--out",
                "out",
                f,
                v,
            ],
            (2,),
            "",
            id=f"flag{_flag}={_value}",
        )
    )


# -- --out ----------------------------------------------------------------------------------
@case("out-user-dir-with-summary", expect="not a kvsched run directory")
def _(r):
    return [*RUN, "--config", write(r, "ok.yaml", tiny()), "--out", "mine"]


@case("out-user-partial-sibling", expect="not created by kvsched")
def _(r):
    return [*RUN, "--config", write(r, "ok.yaml", tiny()), "--out", "keep"]


@case("out-is-a-file", expect="not a directory")
def _(r):
    return [*RUN, "--config", write(r, "ok.yaml", tiny()), "--out", "plain.txt"]


@case("out-below-a-file")
def _(r):
    return [*RUN, "--config", write(r, "ok.yaml", tiny()), "--out", "plain.txt/run"]


@case("out-300-char-name")
def _(r):
    return [*RUN, "--config", write(r, "ok.yaml", tiny()), "--out", "o" * 300]


@case("out-cwd", expect="not a kvsched run directory")
def _(r):
    return [*RUN, "--config", write(r, "ok.yaml", tiny()), "--out", "."]


@case("out-root", expect="")
def _(r):
    return [*RUN, "--config", write(r, "ok.yaml", tiny()), "--out", "/"]


@case("out-symlink-to-user-dir")
def _(r):
    (r / "link").symlink_to(r / "mine")
    return [*RUN, "--config", write(r, "ok.yaml", tiny()), "--out", "link"]


@case("out-empty-dir-is-fine", allowed=(0,))
def _(r):
    (r / "out-empty").mkdir()
    return [*RUN, "--config", write(r, "ok.yaml", tiny()), "--out", "out-empty"]


@case("out-new-nested-parents", allowed=(0,))
def _(r):
    return [*RUN, "--config", write(r, "ok.yaml", tiny()), "--out", "out-p/a/b"]


@case("out-failed-run-leaves-no-parents")
def _(r):
    return [*RUN, "--config", write(r, "bad.yaml", tiny(seed=-1)), "--out", "out-q/a/b"]


@case("out-replaces-earlier-run", allowed=(0,))
def _(r):
    earlier_run(r)
    return [*RUN, "--config", write(r, "ok.yaml", tiny(seed=2)), "--out", "out"]


@case("out-stale-marked-partial-is-cleared", allowed=(0,))
def _(r):
    (r / "out.partial").mkdir()
    (r / "out.partial" / ".kvsched-run").write_text('{"kind": "run"}')
    return [*RUN, "--config", write(r, "ok.yaml", tiny()), "--out", "out"]


@case("out-is-a-sweep-dir", expect="not a kvsched run directory")
def _(r):
    (r / "sweepdir").mkdir()
    (r / "sweepdir" / ".kvsched-run").write_text('{"kind": "sweep"}')
    (r / "sweepdir" / "points.jsonl").write_text("")
    return [*RUN, "--config", write(r, "ok.yaml", tiny()), "--out", "sweepdir"]


# -- traces ---------------------------------------------------------------------------------
def trace_run(r: Path, name: str, text: str, fmt: str) -> list[str]:
    write(r, name, text)
    cfg = tiny(workload={"name": "trace", "params": {"path": name, "format": fmt}})
    return [*RUN, "--config", write(r, "t.yaml", cfg), "--out", "out"]


ROW = {"arrival_s": 0.0, "prompt_tokens": [1, 2, 3], "output_tokens": 2}


@case("trace-id-1e23")
def _(r):
    return trace_run(r, "t.jsonl", json.dumps({**ROW, "request_id": 10**23}) + "\n", "jsonl")


@case("trace-id-float")
def _(r):
    return trace_run(r, "t.jsonl", json.dumps({**ROW, "request_id": 1e23}) + "\n", "jsonl")


@case("trace-infinity-arrival", expect="finite")
def _(r):
    write(r, "i.jsonl", '{"arrival_s": Infinity, "prompt_tokens": [1], "output_tokens": 1}\n')
    return ["trace", "stats", "i.jsonl"]


@case("trace-nan-arrival-run")
def _(r):
    return trace_run(
        r, "t.jsonl", '{"arrival_s": NaN, "prompt_tokens": [1], "output_tokens": 1}\n', "jsonl"
    )


@case("trace-binary-no-format", expect="not a text file")
def _(r):
    write(r, "bin.jsonl", bytes(range(256)) * 4)
    return ["trace", "stats", "bin.jsonl"]


@case("trace-directory")
def _(r):
    (r / "tdir.jsonl").mkdir()
    return ["trace", "stats", "tdir.jsonl"]


@case("trace-capacities-nan", expect="--capacities")
def _(r):
    write(r, "ok.jsonl", json.dumps(ROW) + "\n")
    return ["trace", "stats", "ok.jsonl", "--capacities", "nan"]


@case("trace-start-inf")
def _(r):
    write(r, "ok.jsonl", json.dumps(ROW) + "\n")
    return ["trace", "stats", "ok.jsonl", "--start-s", "inf"]


@case("trace-azure-bom-is-fine", allowed=(0,))
def _(r):
    text = "\ufeffTIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,10,2\n"
    write(r, "a.csv", text)
    return ["trace", "stats", "a.csv"]


@case("trace-clients-billion")
def _(r):
    write(r, "ok.jsonl", json.dumps(ROW) + "\n")
    params = {"path": "ok.jsonl", "format": "jsonl", "num_clients": 1e9}
    cfg = tiny(workload={"name": "trace", "params": params})
    return [*RUN, "--config", write(r, "t.yaml", cfg), "--out", "out"]


@case("trace-string-ids-kept", allowed=(0,))
def _(r):
    rows = [{**ROW, "request_id": f"req-{i}", "arrival_s": i * 0.01} for i in range(3)]
    return trace_run(r, "s.jsonl", "".join(json.dumps(x) + "\n" for x in rows), "jsonl")


# -- sweeps and tune ------------------------------------------------------------------------
def sweep_file(r: Path, axes: dict | str, name: str = "s.yaml") -> str:
    if isinstance(axes, str):
        return write(r, name, f"base: {json.dumps(tiny())}\n{axes}")
    return write(r, name, {"base": tiny(), "axes": axes})


@case("sweep-billion-laughs-axis", expect="aliases")
def _(r):
    return ["sweep", sweep_file(r, BILLION_LAUGHS + "\naxes:\n  seed: *i\n"), "--out", "sweep"]


@case("sweep-huge-grid", expect="bound")
def _(r):
    axes = {
        "seed": list(range(100)),
        "cache.page_size": [8, 16, 32, 64],
        "router.lanes": list(range(1, 300)),
    }
    return ["sweep", sweep_file(r, axes), "--out", "sweep"]


@case("sweep-axis-nan")
def _(r):
    return ["sweep", sweep_file(r, {"sample_interval_s": [float("nan")]}), "--out", "sweep"]


@case("sweep-axis-bool")
def _(r):
    return ["sweep", sweep_file(r, {"cluster.num_nodes": [True]}), "--out", "sweep"]


@case("sweep-out-user-dir", expect="not a kvsched sweep directory")
def _(r):
    return ["sweep", sweep_file(r, {"seed": [1]}), "--out", "mine", "--restart"]


@case("sweep-file-is-dir", expect="is a directory")
def _(r):
    (r / "sd").mkdir()
    return ["sweep", "sd", "--out", "sweep"]


@case("sweep-corrupt-journal-line", expect="points.jsonl:1")
def _(r):
    (r / "sweep").mkdir()
    (r / "sweep" / ".kvsched-run").write_text('{"kind": "sweep"}')
    (r / "sweep" / "points.jsonl").write_text('{"point_id": \n{"point_id": "x", "status": "ok"}\n')
    return ["sweep", sweep_file(r, {"seed": [1]}), "--out", "sweep", "--quiet"]


@case("sweep-workers-zero")
def _(r):
    return ["sweep", sweep_file(r, {"seed": [1]}), "--out", "sweep", "--workers", "0"]


@case("tune-seeds-text", expect="--seeds")
def _(r):
    return ["tune", "--model", "llama-3-8b", "--seeds", "a,b", "--out", "tune"]


@case("tune-duration-nan")
def _(r):
    return ["tune", "--model", "llama-3-8b", "--duration", "nan", "--out", "tune"]


@case("tune-out-user-dir", expect="not a kvsched sweep directory")
def _(r):
    return ["tune", "--model", "llama-3-8b", "--out", "mine", "--duration", "1"]


@case("tune-base-fifo", expect="not a regular file")
def _(r):
    os.mkfifo(r / "base.yaml")
    return ["tune", "--model", "llama-3-8b", "--base", "base.yaml", "--out", "tune"]


# -- reports --------------------------------------------------------------------------------
@case("report-not-a-run")
def _(r):
    return ["report", "mine", "--out", "report.html"]


@case("report-out-below-file")
def _(r):
    earlier_run(r)
    return ["report", "out", "--out", "plain.txt/r.html"]


@case("report-over-user-file", expect="not written by kvsched")
def _(r):
    earlier_run(r)
    return ["report", "out", "--out", "plain.txt"]


@case("compare-over-user-file", expect="not written by kvsched")
def _(r):
    earlier_run(r)
    return ["compare", "out", "out", "--out", "mine/notes.txt"]


@case("report-twice-replaces-its-own", allowed=(0,))
def _(r):
    earlier_run(r)
    write(r, "report-a/r.html", "<!doctype html><html><head><title>kvsched report: old</title>")
    return ["report", "out", "--out", "report-a/r.html"]


@case("compare-missing")
def _(r):
    return ["compare", "nope-a", "nope-b"]


@case("check-baseline-random-bytes")
def _(r):
    earlier_run(r)
    write(r, "base.json", bytes(range(256)))
    return ["check", "out", "--baseline", "base.json"]


@case("check-update-below-file")
def _(r):
    earlier_run(r)
    return ["check", "out", "--baseline", "plain.txt/b.json", "--update"]


@case("timeline-not-a-run")
def _(r):
    return ["timeline", "mine", "--out", "report-t.json"]


@case("timeline-window-nan")
def _(r):
    earlier_run(r)
    return ["timeline", "out", "--out", "report-t.json", "--start", "nan"]


@case("timeline-over-user-dir")
def _(r):
    earlier_run(r)
    return ["timeline", "out", "--out", "mine"]


@case("validate-not-a-run")
def _(r):
    return ["validate", "mine"]


@case("validate-random-bytes-dir")
def _(r):
    write(r, "v/summary.json", bytes(range(256)))
    return ["validate", "v"]


# -- commands -------------------------------------------------------------------------------
@case("bench-help", allowed=(0, 2))
def _(r):
    return ["bench", "--help"]


@case("calibrate-help", allowed=(0, 2))
def _(r):
    return ["calibrate", "--help"]


@case("unknown-command")
def _(r):
    return ["frobnicate"]


@pytest.mark.parametrize("setup,allowed,expect", CASES)
def test_hostile_case(tmp_path, setup, allowed, expect):
    argv = setup(tmp_path)
    user = make_user_files(tmp_path)  # and the setup's own files: all must survive
    code, err = check_case(argv, tmp_path, allowed=allowed, user=user)
    assert expect in err, err
    if code == 2 and argv[0] == "run":
        assert not (tmp_path / "out").exists() or (tmp_path / "out" / ".kvsched-run").is_file()
    assert not (tmp_path / "out-q").exists()  # a failed run removes the parents it made


def test_string_request_ids_stay_text(tmp_path):
    rows = [{**ROW, "request_id": f"req-{i}", "arrival_s": i * 0.01} for i in range(3)]
    argv = trace_run(tmp_path, "s.jsonl", "".join(json.dumps(x) + "\n" for x in rows), "jsonl")
    assert check_case(argv, tmp_path, allowed=(0,))[0] == 0
    import pandas as pd

    ids = set(pd.read_csv(next(tmp_path.glob("out/*/requests.csv")), dtype=str).request_id)
    assert ids <= {"req-0", "req-1", "req-2"} and ids
    timeline = ["timeline", "out", "--out", "out-timeline.json"]
    assert check_case(timeline, tmp_path, allowed=(0,))[0] == 0
    assert '"request":"req-0"' in (tmp_path / "out-timeline.json").read_text()


def test_replacing_a_run_keeps_nothing_stale(tmp_path):
    earlier_run(tmp_path)
    cfg = tiny(arms={"only": {}})
    argv = [*RUN, "--config", write(tmp_path, "one.yaml", cfg), "--out", "out"]
    assert check_case(argv, tmp_path, allowed=(0,))[0] == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir()) == ["only"]
