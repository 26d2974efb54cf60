"""The page reads a long trace's tail first and older pages on demand (issue 23), in
Chromium (the fixtures of `tests/server/test_page.py`)."""

from __future__ import annotations

from agentfs.core.project import Project
from tests.conftest import long_trace
from tests.server.conftest import Served
from tests.server.test_page import log_in, page, pytestmark, sync_api  # noqa: F401 -- fixtures


def test_the_page_shows_the_tail_and_older_messages_on_demand(served: Served, page):  # noqa: F811
    long_trace(Project.open(served.root), "t", 250, commit=True)
    expect = sync_api.expect
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/tree" in r.url else None)
    log_in(page, served)
    page.goto(served.url + "#trace=t")

    expect(page.locator("#m-250")).to_contain_text("#250")
    expect(page.locator("#tree > article")).to_have_count(100)  # the tail only
    expect(page.locator("#m-150")).to_have_count(0)
    older = page.locator("#tree > button.show-older")
    expect(older).to_have_attribute("title", "Read the 100 messages of the main path before #151")
    assert all("limit=100" in url for url in asked)

    older.focus()  # reachable and usable from the keyboard
    page.keyboard.press("Enter")
    expect(page.locator("#m-51")).to_contain_text("#51")
    expect(older).to_have_attribute("title", "Read the 100 messages of the main path before #51")
    expect(older).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#m-1")).to_contain_text("system")
    expect(older).to_have_count(0)  # the first message is shown
    expect(page.locator("#tree > article")).to_have_count(250)

    asked.clear()
    with served.client() as client:  # a live update reloads the tail, keeps what was read
        client.post("/api/traces/t/messages", json={"text": "one more"})
    expect(page.locator("#m-251")).to_contain_text("one more")
    expect(page.locator("#tree > article")).to_have_count(251)
    expect(page.locator("#m-1")).to_have_count(1)
    # the new tail, and the page between it and what was read (trimmed to the new part)
    assert asked and all(url.endswith("limit=100") or "before=152" in url for url in asked)

    with served.client() as client:  # a rewind changes the path: the tail alone again
        client.post("/api/traces/t/rewind", json={"sequence": 200})
    expect(page.locator("#m-200")).to_have_class("msg role-user head")
    expect(older).to_have_attribute("title", "Read the 100 messages of the main path before #101")
    expect(page.locator("#tree > article")).to_have_count(100)
