"""The viewer page in a real browser: Debian's Chromium driven by Playwright."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import assert_git_clean, run_cli
from tests.server.conftest import Served, compressed_and_rewound

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    pytest.skip("the browser tests need Chromium: apt-get install chromium (.ci/run does)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api",
                               reason="the browser tests need the test extra (playwright)")

pytestmark = pytest.mark.timeout(240)

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture
def page(tmp_path: Path):
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(30_000)
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            yield page
            assert errors == []  # no script error on the page
        finally:
            browser.close()


def log_in(page, served: Served) -> None:
    """Open the address the server printed, as a person does: the browser keeps the
    session cookie and lands on the page, the token gone from its address."""
    page.goto(served.login_url)
    assert page.url == served.url
    [cookie] = page.context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/"
    assert cookie["value"] != served.token
    assert page.evaluate("document.cookie") == ""  # no script of the page can read it


def test_without_the_printed_address_the_page_says_to_open_it(served: Served, page):
    run_cli("new", "t", "-m", "hi", cwd=served.root)
    answer = page.goto(served.url + "#trace=t")
    assert answer is not None and answer.status == 401
    sync_api.expect(page.locator("body")).to_contain_text(
        "Open the address `agentfs serve` printed")
    log_in(page, served)
    page.goto(served.url + "#trace=t")
    sync_api.expect(page.locator("#tree")).to_contain_text("hi")
    assert "token" not in page.url


def test_the_page_shows_the_tree_opens_a_summary_and_posts(served: Served, page):
    compressed_and_rewound(served.root)
    expect = sync_api.expect
    log_in(page, served)
    page.goto(served.url + "#trace=t")

    summary = page.locator("#m-12")
    expect(summary).to_contain_text("Summary 1: the user asked for notes")
    expect(summary).to_have_class("msg role-user summary head")
    opener = summary.locator("details.originals > summary")
    expect(opener).to_have_text("Show the 5 messages this summary replaced")
    expect(page.locator("#m-3")).to_have_count(0)  # folded until opened
    opener.click()
    original = page.locator("#m-3")
    expect(original).to_contain_text("Looking at notes.md")
    expect(original.locator("strong")).to_have_text("notes.md")  # Markdown, rendered
    expect(original.locator("details.call > summary")).to_contain_text("read_file")
    expect(original.locator(":scope > header .usage")).to_contain_text("model ")  # its call
    expect(page.locator("#trace-usage")).to_contain_text("calls")  # the trace's total
    expect(page.locator("nav a[data-trace=t] .state")).to_contain_text("$")
    expect(page.locator("#m-9")).to_contain_text("Answer 3")
    branch = summary.locator("details.branch")
    expect(branch).to_contain_text("compression side branch agentfs/t/compression-")
    rewound = page.locator("#tree > details.fork")
    expect(rewound).to_contain_text("2 messages left off the path")
    rewound.locator("summary").click()
    expect(page.locator("#m-13")).to_contain_text("fourth question")

    hostile = 'See <img src=x onerror="window.pwned=1"> and **this**'
    page.fill("#message", hostile)
    page.click("#send")
    posted = page.locator("#m-15")
    expect(posted).to_contain_text('See <img src=x onerror="window.pwned=1"> and this')
    expect(posted.locator("img")).to_have_count(0)  # text, never markup
    expect(posted.locator("strong")).to_have_text("this")
    expect(posted).to_have_class("msg role-user head")
    expect(page.locator("#notice")).to_have_text("posted as #15")
    assert page.evaluate("window.pwned") is None
    with served.client() as client:
        shown = client.get("/api/traces/t/messages").json()
    assert shown["head"] == 15 and shown["messages"][-1]["text"] == hostile

    summary.locator(":scope > header .rewind").click()  # back to the summary
    expect(page.locator("#confirm-text")).to_contain_text("Make #12 the head?")
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_have_text("head moved from #15 to #12")
    expect(page.locator("#m-15")).to_have_count(0)  # off the path now, folded
    page.click("#compress")  # nothing to compress after the summary: refused, said so
    expect(page.locator("#notice")).to_contain_text("a summary would not make it shorter")

    page.fill("#message", "go on")
    page.click("#send-run")  # the answer arrives through the event stream
    expect(page.locator("#m-17.role-assistant")).to_contain_text("Answer")
    expect(page.locator("#live-events")).to_contain_text("run finished: end_turn")
    assert_git_clean(served.root)
