"""The HTML report, parsed: every section and plot present, inline SVG only, strings escaped."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from reports.html import write_report
from sim.rundir import arm_dir_name
from tests.reports.conftest import make_run


class Page(HTMLParser):
    """Tags, ids, figures (with caption text), attributes that could point outside the file."""

    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.ids: set[str] = set()
        self.figures: dict[str, dict] = {}
        self.refs: list[str] = []  # href / src / xlink:href values
        self.text: list[str] = []
        self._figure: str | None = None
        self._in_caption = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if "id" in a:
            self.ids.add(a["id"])
        self.refs += [
            v for k, v in attrs if k in ("href", "src", "xlink:href", "action", "srcset") and v
        ]
        if tag == "figure":
            self._figure = a["id"]
            self.figures[a["id"]] = {"title": a.get("data-title", ""), "svg": 0, "caption": ""}
        elif tag == "svg" and self._figure:
            self.figures[self._figure]["svg"] += 1
        elif tag == "figcaption":
            self._in_caption = True

    def handle_endtag(self, tag):
        if tag == "figure":
            self._figure = None
        elif tag == "figcaption":
            self._in_caption = False

    def handle_data(self, data):
        self.text.append(data)
        if self._in_caption and self._figure:
            self.figures[self._figure]["caption"] += data


def parse(path: Path) -> tuple[str, Page]:
    text = path.read_text(encoding="utf-8")
    page = Page()
    page.feed(text)
    return text, page


def one_arm_copy(run: Path, dest: Path, arm: str = "engine") -> Path:
    """The run with only `arm` left in summary.json: a cheaper report for tests of one feature."""
    shutil.copytree(run, dest)
    summary = json.loads((dest / "summary.json").read_text())
    summary["arms"] = {arm: summary["arms"][arm]}
    (dest / "summary.json").write_text(json.dumps(summary))
    return dest


@pytest.fixture(scope="module")
def report(tiny_run, tmp_path_factory) -> tuple[str, Page]:
    return parse(write_report([tiny_run], tmp_path_factory.mktemp("rep") / "report.html"))


ARMS = ["openclaw", "paged+prefix", "engine"]
SECTIONS = ["headline", "gain", "latency", "memory", "load", "hits", "study-eviction", "provenance"]
FIGURES = [
    "fig-gain",
    "fig-cdf-ttft",
    "fig-cdf-e2e",
    "fig-ttft-vs-prompt",
    "fig-kv-0",
    "fig-kv-1",
    "fig-kv-2",
    "fig-queue",
    "fig-node-load",
    "fig-requests-per-node",
    "fig-hit-rate",
    "fig-study-eviction-bars",
]


def test_every_section_and_plot_is_present(report):
    _, page = report
    assert set(SECTIONS) <= page.ids
    assert set(FIGURES) <= set(page.figures)
    for fid, fig in page.figures.items():
        assert fig["svg"] == 1, fid  # one inline SVG per figure
        assert fig["title"], fid
        assert fig["caption"].strip().endswith((".", ")")), fid  # a sentence saying what to look at


def test_self_contained_no_external_reference(report):
    text, page = report
    assert not {"script", "link", "img", "iframe", "object", "embed"} & set(page.tags)
    assert all(ref.startswith("#") for ref in page.refs), [
        r for r in page.refs if not r.startswith("#")
    ][:3]
    assert all(u.startswith("url(#") for u in re.findall(r"url\([^)]*\)", text))
    assert "@import" not in text and "@font-face" not in text
    # The only URLs left are XML namespace names of the inline SVGs, which are never fetched.
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", text))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}, urls
    assert "data:" not in text  # no embedded raster images either: plots are vector


def test_plots_carry_axis_labels_with_units(report):
    text, _ = report
    for label in [
        "time to first token (ms, log scale)",
        "prompt length (tokens)",
        "KV memory (GB)",
        "simulated time (s)",
        "requests (count)",
        "prompt tokens from cache (%)",
    ]:
        assert label in text, label


def test_headline_marks_best_and_ratios(tiny_run, report):
    text, _ = report
    summary = json.loads((tiny_run / "summary.json").read_text())["arms"]
    best_hit = max(m["prefix_hit_rate"] for m in summary.values())
    assert f"{100 * best_hit:.1f}&#9733;" in text
    ratio = summary["engine"]["output_throughput"] / summary["openclaw"]["output_throughput"]
    assert f"&times;{ratio:.2f}" in text


def test_provenance_footer(tiny_run, report):
    text, _ = report
    footer = text[text.index('id="provenance"') :]
    info = json.loads((tiny_run / "run_info.json").read_text())
    model = json.loads((tiny_run / "summary.json").read_text())["latency_model"]
    for item in ["seed", "version", "latency model", "date", "wall time", info["date"], model]:
        assert item in footer, item
    assert "<details><summary>experiment config (config.json)</summary><pre>" in footer


def test_same_page_again_whatever_the_workers(tiny_run, report, tmp_path):
    """Deterministic: a second render is byte-identical, whether its figures are built in this
    process or in two forked workers."""
    text, _ = report
    for workers in (1, 2):
        again = write_report([tiny_run], tmp_path / f"w{workers}.html", workers=workers)
        assert again.read_text(encoding="utf-8") == text, workers


def test_script_names_render_as_text(tmp_path):
    bad = "<script>alert(1)</script>"
    run = make_run(tmp_path / "run", name=bad, arms={bad: {}}, duration_s=2)
    text, page = parse(write_report([run], tmp_path / "r.html"))
    assert "script" not in page.tags
    assert "<script" not in text.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert (run / arm_dir_name(bad)).is_dir()


def test_missing_optional_columns_and_files_still_render(tiny_run, tmp_path):
    run = tmp_path / "bare"
    shutil.copytree(tiny_run, run)
    (run / "run_info.json").unlink()
    (run / "config.json").unlink()
    for arm in ARMS:
        d = run / arm_dir_name(arm)
        pd.read_csv(d / "requests.csv")[
            ["arrival_s", "first_token_s", "finish_s", "prompt_tokens", "status"]
        ].to_csv(d / "requests.csv", index=False)
        pd.read_csv(d / "timeseries.csv")[["time_s", "node"]].to_csv(
            d / "timeseries.csv", index=False
        )
    summary = json.loads((run / "summary.json").read_text())
    summary["arms"] = {
        a: {"output_throughput": m["output_throughput"]} for a, m in summary["arms"].items()
    }
    (run / "summary.json").write_text(json.dumps(summary))
    text, page = parse(write_report([run], tmp_path / "r.html"))
    assert {"headline", "latency", "memory", "load", "hits"} <= page.ids
    assert "study-eviction" not in page.ids
    assert "No arm recorded KV memory" in text


def test_run_with_no_finished_request_renders_plain_latency_axes(tiny_run, tmp_path):
    """A run too short for any request to finish (every TTFT unknown): the latency plots are
    empty and on linear axes (a log axis with no data failed the whole report)."""
    run = one_arm_copy(tiny_run, tmp_path / "short")
    requests = run / arm_dir_name("engine") / "requests.csv"
    frame = pd.read_csv(requests)
    frame.assign(status="unfinished", first_token_s=np.nan, finish_s=np.nan).to_csv(
        requests, index=False
    )
    text, page = parse(write_report([run], tmp_path / "r.html"))
    assert {"fig-cdf-ttft", "fig-cdf-e2e", "fig-ttft-vs-prompt"} <= set(page.figures)
    assert "time to first token (ms)<" in text and "(ms, log scale)" not in text


def test_false_hit_section_appears_with_wrong_reuse(tiny_run, report, tmp_path):
    """Wrong reuse (a hash-only index): its own section, and a warning on the headline hit rate."""
    assert "study-false-hits" not in report[1].ids  # all zero in the real run: no section
    run = one_arm_copy(tiny_run, tmp_path / "fh")
    d = run / arm_dir_name("engine")
    requests = pd.read_csv(d / "requests.csv")
    requests.assign(
        false_hits=(requests.request_id % 2), wrong_reuse_tokens=16 * (requests.request_id % 3 == 0)
    ).to_csv(d / "requests.csv", index=False)
    summary = json.loads((run / "summary.json").read_text())
    summary["arms"]["engine"].update(false_hits=64, wrong_reuse_tokens=688)
    (run / "summary.json").write_text(json.dumps(summary))
    text, page = parse(write_report([run], tmp_path / "after.html"))
    assert "study-false-hits" in page.ids
    assert {"fig-study-false-hits-bars", "fig-study-false-hits-cum"} <= set(page.figures)
    assert "&#9888;" in text and "wrong answers" in text


def test_new_columns_get_their_sections(tiny_run, tmp_path):
    run = one_arm_copy(tiny_run, tmp_path / "extra")
    d = run / arm_dir_name("engine")
    series = pd.read_csv(d / "timeseries.csv")
    series.assign(network_bytes=series.time_s * 1e6, widget_count=1.0).to_csv(
        d / "timeseries.csv", index=False
    )
    _, page = parse(write_report([run], tmp_path / "r.html"))
    assert {"study-network", "other-series"} <= page.ids
    assert {"fig-study-network-series", "fig-other-series-0"} <= set(page.figures)


def test_two_runs_in_one_report_label_arms_by_run(tiny_run, tmp_path):
    run = one_arm_copy(tiny_run, tmp_path / "one")
    text, page = parse(write_report([run, run], tmp_path / "r.html"))
    assert "tiny/engine" in text and "tiny#2/engine" in text
    assert len([f for f in page.figures if f.startswith("fig-kv-")]) == 2


def screenshot(html: str, tmp_path: Path, width: int = 1000, height: int = 1200) -> np.ndarray:
    """Render with headless Chromium (scripts/screenshot_report.sh fails on any console message);
    the screenshot as an RGB array."""
    page = tmp_path / "r.html"
    page.write_text(html, encoding="utf-8")
    script = Path(__file__).resolve().parents[2] / "scripts" / "screenshot_report.sh"
    png = tmp_path / "r.png"
    done = subprocess.run(
        [str(script), str(page), str(png), str(width), str(height)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    log = Path(str(png) + ".console.log").read_text(errors="replace")
    assert ":CONSOLE" not in log and "Uncaught" not in log, log[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return np.asarray(Image.open(png).convert("RGB"))


def assert_not_blank(pixels: np.ndarray) -> None:
    """Ink on the page: plenty of non-white pixels, several colours (text and plots drawn)."""
    ink = (pixels < 200).any(axis=2)
    assert ink.mean() > 0.01, f"only {ink.mean():.2%} of the screenshot is not white"
    assert len(np.unique(pixels.reshape(-1, 3)[::7], axis=0)) > 20


@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium not installed")
def test_chromium_renders_without_console_errors(report, tmp_path):
    """The real browser: no console message, and the screenshot shows the report."""
    assert_not_blank(screenshot(report[0], tmp_path))


@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium not installed")
def test_blank_page_is_caught(tmp_path):
    """The check itself: an empty page fails it."""
    with pytest.raises(AssertionError, match="not white"):
        assert_not_blank(screenshot("<!doctype html><title>x</title>", tmp_path))


def test_gantt_view_with_steps(report, tmp_path):
    """A run with steps.csv gets the Gantt section: one figure per arm that recorded steps,
    over the default window (5 s from mid-run) or the one asked for."""
    assert "gantt" not in report[1].ids  # the fixture run recorded no steps
    run = make_run(tmp_path / "steps", record_steps=True, arms={"engine": {}})
    text, page = parse(write_report([run], tmp_path / "r.html"))
    assert "gantt" in page.ids and "fig-gantt-0" in page.figures
    assert "2.5 to 7.5 s of simulated time" in page.figures["fig-gantt-0"]["caption"]
    sections = [i for i in ("load", "gantt", "hits") if f'<section id="{i}"' in text]
    assert sections == ["load", "gantt", "hits"]
    html, page = parse(write_report([run], tmp_path / "w.html", gantt_window=(1.0, 2.0)))
    assert "1 to 2 s of simulated time" in page.figures["fig-gantt-0"]["caption"]
    if shutil.which("chromium"):  # the section alone, in the real browser
        start, end = (
            html.index('<section id="gantt"'),
            html.index("</section>", html.index('<section id="gantt"')),
        )
        page_html = html[: html.index("<body>") + 6] + html[start:end] + "</section></body></html>"
        assert_not_blank(screenshot(page_html, tmp_path, 1000, 900))
