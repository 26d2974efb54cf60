"""The page for daily work in a real browser: buttons enabled only when they can act,
goals as a tree with states, the trace list, the keyboard, and a 375 px wide screen.
Screenshots go to `screenshots/` in the test's folder (its path is printed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentfs.core.goals import GoalTree
from tests.conftest import git, run_cli
from tests.server import test_page  # skips this module too without Chromium or Playwright
from tests.server.conftest import Served
from tests.server.test_page_tour import Shots, patient_expect

sync_api = test_page.sync_api
page = test_page.page  # the browser tab, its script errors checked at the end
__all__ = ["patient_expect"]  # autouse: assertions wait 30 s, as the page's actions may

pytestmark = pytest.mark.timeout(240)


def _goals(root: Path) -> None:
    """Trace `t`'s goals.json as the goal tool writes it: one of each state, nested."""
    tree = GoalTree()
    tree.add("Read the notes")
    tree.add("Find the owners", under="1")
    tree.add("Skim the old notes", under="1")
    tree.finish("1.1", "done", "Bo and Chen")
    tree.finish("1.2", "abandoned", "no old notes")
    tree.add("Answer")
    (root / "traces/t/goals.json").write_bytes(tree.dump())


def _no_sideways_scroll(tab) -> None:
    assert tab.evaluate("document.documentElement.scrollWidth") <= tab.evaluate(
        "window.innerWidth"), "the page scrolls sideways"


def test_states_goals_keys_and_a_narrow_screen(served: Served, page, tmp_path: Path):
    expect = sync_api.expect
    root = served.root
    run_cli("new", "t", "-m", "Read notes.md please", cwd=root)
    run_cli("run", "t", cwd=root)  # 3 assistant (call), 4 tool, 5 answer: nothing to do
    _goals(root)
    run_cli("new", "u", "-m", "a second trace", cwd=root)
    shots = Shots(page, tmp_path / "screenshots")
    page.set_viewport_size({"width": 1280, "height": 900})
    test_page.log_in(page, served)

    page.route("**/api/traces", _with_summary)
    page.goto(served.url + "#trace=t")
    expect(page.locator("#m-5.head")).to_contain_text("Answer 1")
    _list_buttons_and_goals(page)
    shots.take("desktop")
    _keys(page)
    _narrow_screen(page, served, shots)
    assert json.loads((root / "traces/t/goals.json").read_text())["focus"] == "1"
    assert [p.name for p in shots.taken] == [
        "00-desktop.png", "01-375-trace.png", "02-375-search.png", "03-375-editor.png"]
    # the page changed no file: only the goals this test wrote wait to be committed
    assert git(root, "status", "--porcelain").splitlines() == ["?? traces/t/goals.json"]


def _with_summary(route) -> None:
    """The trace list with other summary fields for `u`, and `t` without them (as an
    older server sends it: the page falls back to today's fields)."""
    listed = route.fetch().json()
    for row in listed["traces"]:
        if row["trace"] == "u":
            row.update(status="waiting", title="The second trace", messages=2,
                       last_activity="2026-01-02T03:04:05+00:00")
        if row["trace"] == "t":
            for key in ("status", "title", "messages", "last_activity"):
                row.pop(key, None)
    route.fulfill(json=listed)


def _list_buttons_and_goals(page) -> None:
    expect = sync_api.expect
    row = page.locator("nav a[data-trace=t]")  # today's fields: running, updated, usage
    expect(row.locator(".badge")).to_have_text("idle")
    expect(row.locator(".state")).to_contain_text(" · just now · $")
    summarised = page.locator("nav a[data-trace=u]")
    expect(summarised.locator(".name")).to_have_text("The second trace")
    expect(summarised.locator(".badge")).to_have_text("waiting")
    expect(summarised.locator(".state")).to_have_text("#2 · 2 messages · 2026-01-02")

    # Buttons that cannot act are disabled and say why.
    expect(page.locator("#run")).to_be_disabled()
    expect(page.locator("#run")).to_have_attribute(
        "title", "nothing to do: the model answered; send a message first")
    expect(page.locator("#stop")).to_be_disabled()
    expect(page.locator("#stop")).to_have_attribute("title", "no run is going")
    expect(page.locator("#compress")).to_be_enabled()
    expect(page.locator("#m-5 > header .edit")).to_be_enabled()

    # Goals: a tree, each state its own look, the focus marked.
    goals = page.locator("#goal-tree")
    expect(goals.locator("li.goal-open.goal-focus[data-goal='1'] > .goal-state")).to_have_text(
        "focus")
    expect(goals.locator("li[data-goal='1'] li.goal-done[data-goal='1.1'] > .goal-state")
           ).to_have_text("done")
    expect(goals.locator("li.goal-abandoned[data-goal='1.2'] > .goal-title")).to_have_css(
        "text-decoration-line", "line-through")
    expect(goals.locator("li.goal-open[data-goal='2'] > .goal-state")).to_have_text("open")


def _keys(page) -> None:
    """j/k between messages, e edits, / searches, Escape closes."""
    expect = sync_api.expect
    page.locator("body").click(position={"x": 5, "y": 300})
    page.keyboard.press("j")
    expect(page.locator("#m-1")).to_be_focused()
    page.keyboard.press("j")
    page.keyboard.press("j")
    expect(page.locator("#m-3")).to_be_focused()
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") == "solid"
    page.keyboard.press("k")
    expect(page.locator("#m-2")).to_be_focused()
    page.keyboard.press("e")
    expect(page.locator("#editor")).to_be_visible()
    expect(page.locator("#editor-title")).to_have_text("Edit #2 user")
    expect(page.locator("#editor-text")).to_have_value("Read notes.md please")
    page.keyboard.press("Escape")  # closes without saving
    expect(page.locator("#editor")).to_be_hidden()
    page.keyboard.press("/")
    expect(page.locator("#search-q")).to_be_focused()
    page.keyboard.type("notes.md")
    page.keyboard.press("Enter")
    expect(page.locator("#search-summary")).to_have_text('2 messages holding "notes.md"')
    page.locator("#search-hits a").nth(1).focus()
    page.keyboard.press("Enter")  # the link: the message, focused
    expect(page.locator("#m-3")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.locator("#search-results")).to_be_hidden()


def _narrow_screen(page, served: Served, shots: Shots) -> None:
    """375 px wide: everything readable without scrolling sideways."""
    expect = sync_api.expect
    page.set_viewport_size({"width": 375, "height": 800})
    page.goto(served.url + "#trace=t")
    expect(page.locator("#m-5.head")).to_be_visible()
    _no_sideways_scroll(page)
    shots.take("375-trace")
    page.fill("#search-q", "notes")
    page.click("#search")
    expect(page.locator("#search-hits li")).to_have_count(3)
    _no_sideways_scroll(page)
    shots.take("375-search")
    page.locator("#m-3 > header .edit").click()
    expect(page.locator("#editor")).to_be_visible()
    box = page.locator("#editor").bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 375
    _no_sideways_scroll(page)
    shots.take("375-editor")
    page.click("#editor-cancel")
