"""The report page's HTML: every value from the run is text on the page, never markup (names, reasons,
errors, notes, config values and inputs can hold anything)."""

import html.parser
import json
import re

from parallel_steps.report.data import page_data
from parallel_steps.report.records import RunRecords
from parallel_steps.report.render import render_html
from parallel_steps.store.attempts import Attempts
from parallel_steps.store.logs import RunLogs

PAYLOAD = "<img src=x onerror=alert(1)> & 'quoted' \"twice\""


class _Page(html.parser.HTMLParser):
    """The tags of a page and its text outside scripts and styles."""

    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []
        self._raw = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._raw = tag in ("script", "style")

    def handle_endtag(self, tag):
        self._raw = False

    def handle_data(self, data):
        if not self._raw:
            self.text.append(data)


def test_every_value_from_the_run_is_text_on_the_page(tmp_path):
    attempts = Attempts(
        mini_batch=[0, 1],
        attempt=[1, 1],
        worker=["node0/process000"] * 2,
        items=[1, None],
        items_succeeded=[1, 0],
        outcome=["succeeded", "failed"],
        start=[0.0, 1.0],
        duration=[1.0, 1.0],
        error=["", PAYLOAD],
    )
    summary = dict(name=PAYLOAD, status="Failed", status_reason=PAYLOAD, run_dir=str(tmp_path), config={"x": PAYLOAD})
    data = page_data(RunRecords(tmp_path, RunLogs(tmp_path, create=False), summary, 0.0, attempts, []))
    data["notes"].append(PAYLOAD)
    page = render_html(data)

    parsed = _Page()
    parsed.feed(page)
    assert "img" not in parsed.tags
    assert parsed.tags.count("script") == 3  # BokehJS, the data, the charts
    text = "".join(parsed.text)
    assert text.count(PAYLOAD) == 5  # the title, the heading, the reason, the error, the note
    embedded = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    assert json.loads(embedded.group(1)) == json.loads(json.dumps(data, default=str))
