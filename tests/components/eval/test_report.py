"""The HTML report: parsed, its PNGs decoded, and rendered by headless Chromium."""

from __future__ import annotations

import base64
import io
import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image
import pytest
from click.testing import CliRunner

from components.eval.cli import report_command
from components.eval.report import render_report

from .rows import sample_rows, written

CHROMIUM = "/usr/bin/chromium"
PLOTS = 8


class _Page(HTMLParser):
    """Collects images, table cells and headings."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict[str, str]] = []
        self.cells: list[str] = []
        self.headings: list[str] = []
        self._in: str | None = None
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "img":
            self.images.append(values)
        for name in ("src", "href"):
            if values.get(name) and not values[name].startswith("data:"):
                self.external.append(values[name])
        self._in = tag if tag in ("td", "th", "h1", "h2", "h3") else None

    def handle_data(self, data: str) -> None:
        if self._in in ("td", "th"):
            self.cells.append(data)
        elif self._in in ("h1", "h2", "h3"):
            self.headings.append(data)

    def handle_endtag(self, tag: str) -> None:
        self._in = None


def parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    return page


def decoded_pngs(page: _Page) -> list:
    images = []
    for img in page.images:
        prefix = "data:image/png;base64,"
        assert img["src"].startswith(prefix)
        data = base64.b64decode(img["src"][len(prefix) :], validate=True)
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        pixels = matplotlib.image.imread(io.BytesIO(data), format="png")
        # non-empty: a real size and more than one colour drawn
        assert pixels.shape[0] > 100 and pixels.shape[1] > 100
        assert pixels.reshape(-1, pixels.shape[-1]).std(axis=0).max() > 0.05
        images.append(pixels)
    return images


def test_single_run_report_is_self_contained_with_plots() -> None:
    page = parse(render_report([("run-a", sample_rows())]))
    assert page.external == []  # nothing outside the file
    assert len(page.images) == PLOTS
    assert len(decoded_pngs(page)) == PLOTS
    assert {i["alt"] for i in page.images} >= {
        "Pass rate by family",
        "Pass rate by difficulty",
        "Failure modes",
        "Turns per trial",
        "Tokens per trial",
    }
    assert {"Summary", "By family", "By difficulty", "Per task"} <= set(page.headings)
    cells = page.cells
    # summary: accuracy 3/6, and the per-task rows
    assert cells[cells.index("accuracy") + 1] == "0.500"
    assert {"hello", "csv", "tar"} <= set(cells)


def test_the_report_shows_what_the_agent_ran_in_each_failed_trial() -> None:
    rows = sample_rows()
    for row in rows:
        row["transcript"] = f"$ echo {row['task_id']} {row['trial']} <&>"
    page_text = render_report([("run-a", rows)])
    page = parse(page_text)
    assert "What the agent ran in failed trials" in page.headings
    failed = [r for r in rows if not r["passed"]]
    assert page_text.count("<details>") == len(failed) == 3
    for row in failed:  # escaped, in a folded block per trial
        assert f"$ echo {row['task_id']} {row['trial']} &lt;&amp;&gt;" in page_text
    assert "$ echo hello 0" not in page_text  # passed trials are not listed
    # results without transcripts (oracle, nop, older files): no such section
    plain = render_report([("run-a", sample_rows())])
    assert "What the agent ran" not in plain and "<details>" not in plain


def test_comparison_report_from_two_result_files(tmp_path: Path) -> None:
    a = written(tmp_path, sample_rows("run-a"), "a.parquet")
    b = written(tmp_path, sample_rows("run-b", flip=True), "b.parquet")
    out = tmp_path / "compare.html"
    result = CliRunner().invoke(report_command, [str(a), str(b), "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = parse(out.read_text())
    assert len(decoded_pngs(page)) == PLOTS
    cells = page.cells
    assert "pass rate run-a" in cells and "pass rate run-b" in cells and "Δ (B − A)" in cells
    # hello: 1.0 -> 0.0, tar: 0.0 -> 1.0
    hello = cells.index("hello")
    assert cells[hello + 3 : hello + 6] == ["1.000", "0.000", "-1.000"]
    tar = cells.index("tar")
    assert cells[tar + 3 : tar + 6] == ["0.000", "1.000", "1.000"]


def test_report_command_refuses_three_files(tmp_path: Path) -> None:
    a = written(tmp_path, sample_rows())
    result = CliRunner().invoke(report_command, [str(a)] * 3 + ["--out", str(tmp_path / "r.html")])
    assert result.exit_code != 0 and "two" in result.output


# Appended to a copy of the report: the browser itself decodes every image and
# reports what it got into a <pre> that --dump-dom prints.
_PROBE = """<pre id="result">pending</pre><script>
// Synchronous on "load": every data: image has been decoded by then, and the
// DOM dump waits for the load event (an async decode() promise it does not).
window.addEventListener("load", () => {
  const images = Array.from(document.images).map(i => [i.alt, i.naturalWidth, i.naturalHeight]);
  document.getElementById("result").textContent = JSON.stringify(
    {images: images, tables: document.querySelectorAll("table").length, title: document.title});
});
</script>"""


@pytest.mark.skipif(shutil.which(CHROMIUM) is None, reason="needs chromium")
def test_chromium_renders_every_plot(tmp_path: Path) -> None:
    report = render_report([("run-a", sample_rows()), ("run-b", sample_rows("run-b", True))])
    (tmp_path / "report.html").write_text(report)
    (tmp_path / "probe.html").write_text(report.replace("</body>", _PROBE + "</body>"))
    common = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run(
        common + ["--virtual-time-budget=10000", "--dump-dom", (tmp_path / "probe.html").as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    found = json.loads(parse_result(dom))
    assert found["title"] == "termrl eval: run-a vs run-b"
    assert found["tables"] >= 6
    assert len(found["images"]) == PLOTS
    for alt, width, height in found["images"]:
        assert width > 100 and height > 100, alt  # the browser decoded a real picture
    shot = tmp_path / "shot.png"
    subprocess.run(
        common
        + ["--window-size=1200,2400", f"--screenshot={shot}", (tmp_path / "report.html").as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert matplotlib.image.imread(shot).shape[:2] == (2400, 1200)


def parse_result(dom: str) -> str:
    start = dom.index('<pre id="result">') + len('<pre id="result">')
    return dom[start : dom.index("</pre>", start)].replace("&quot;", '"').replace("&amp;", "&")


@pytest.mark.parametrize("passed", [False, True])
def test_a_run_where_every_trial_failed_or_passed_renders(passed: bool) -> None:
    """Pass rates of exactly 0 or 1 sit on an end of their interval (in floats a hair inside it
    for some n, e.g. 7): the whiskers must stay >= 0 or matplotlib refuses to draw."""
    first = sample_rows()[0]
    rows = [
        {**first, "task_id": f"t{i}", "passed": passed, "reward": float(passed)} for i in range(7)
    ]
    page = parse(render_report([("base", rows), ("final", sample_rows())]))
    assert len(decoded_pngs(page)) == len(page.images) > 0
