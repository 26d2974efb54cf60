"""The README's `agentfs serve` on the demo workspace, in a real browser: every button of
the page is clicked, its effect checked (the view, and the commit it made), and a
screenshot of each is saved in the test's folder. A button the page gains that this
test does not click fails it."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentfs.core.project import Project
from tests.conftest import assert_git_clean, git, long_trace, mask_branch_bases, run_cli
from tests.server import test_page  # skips this module too without Chromium or Playwright
from tests.server.conftest import Served

sync_api = test_page.sync_api
page = test_page.page  # the browser tab, its script errors checked at the end

pytestmark = pytest.mark.timeout(300)

STATIC = Path(__file__).resolve().parents[2] / "agentfs" / "server" / "static"

#: Every button of the page, by id or (without one) by label: what this test clicks.
CLICKED = {"send", "run", "send-run", "compress", "Rewind here", "Rewind with files",
           "Fork here", "stop", "approve-yes", "approve-no", "approve-always", "confirm-yes",
           "confirm-no", "Edit", "editor-save", "editor-cancel", "search", "new-trace",
           "Show older messages", "Show more"}

#: The buttons scripts make, by label: each `actionButton("label", ...)` in static/.
MADE_BY_SCRIPT = {"Rewind here", "Rewind with files", "Fork here", "Edit", "Show older messages",
                  "Show more"}

HELD_TRACE = "held"
ASKS_TRACE = "asks"

#: The replay script of trace `asks`: four writes, each its own turn, then an answer.
ASKS_SCRIPT = {"turns": [
    *({"text": f"Writing {name}.", "tool_calls": [
        {"name": "write_file", "input": {"path": f"asked/{name}", "content": f"{name}\n"}}]}
      for name in ("yes.txt", "no.txt", "always.txt", "unasked.txt")),
    {"text": "Done asking."},
]}


def _button_names(tab) -> set[str]:
    """The buttons in the page now, by id or label."""
    return set(tab.eval_on_selector_all(
        "button", "(buttons) => buttons.map((b) => b.id || b.textContent.trim())"))


def test_the_page_sources_have_no_button_this_tour_does_not_click():
    html = (STATIC / "index.html").read_text()
    in_html = set()
    for attributes, label in re.findall(r"<button([^>]*)>([^<]*)</button>", html):
        named = re.search(r'\bid="([^"]+)"', attributes)
        in_html.add(named[1] if named else label.strip())
    scripts = "".join(path.read_text() for path in STATIC.glob("*.js"))
    assert scripts.count('createElement("button")') == 1, "buttons are made by actionButton"
    made = set(re.findall(r'actionButton\("([^"]+)"', scripts))
    assert made == MADE_BY_SCRIPT, "a script makes a new kind of button: click it here"
    assert in_html | MADE_BY_SCRIPT == CLICKED, "index.html's buttons changed: click them here"


@pytest.fixture(autouse=True)
def patient_expect() -> Iterator[None]:
    """Assertions wait as long as the page's actions (30 s): a run on a busy machine can
    take longer than expect's own 5 s."""
    sync_api.expect.set_options(timeout=30_000)
    yield
    sync_api.expect.set_options(timeout=5_000)


@pytest.fixture
def fake_model(monkeypatch) -> Iterator[tuple[object, threading.Event]]:
    """The fake Anthropic server for trace `held`, whose one model call waits for the
    event: the Stop button needs a run that is still running when it is clicked."""
    from agentfs.testing import FakeAnthropicServer

    gate = threading.Event()

    def held(body: dict) -> dict:
        assert gate.wait(120), "the test never let the model answer"
        return {"text": "Reading the note.",
                "tool_calls": [{"name": "read_file",
                                "input": {"path": "notes/meeting-2026-11-30.md"}}]}

    with FakeAnthropicServer() as fake:
        fake.enqueue(held, {"text": "never asked for"})
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")  # the server inherits them
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
        yield fake, gate


@pytest.fixture
def workspace_root(tmp_path: Path, fake_model) -> Path:
    """What `agentfs demo` makes, plus trace `held` on the fake Anthropic server."""
    root = tmp_path / "demo"
    run_cli("demo", str(root), cwd=tmp_path)
    run_cli("new", HELD_TRACE, "-m", "Read the meeting note.", "--model",
            "anthropic:claude-test", cwd=root)
    script = tmp_path / "asks.json"
    script.write_text(json.dumps(ASKS_SCRIPT))
    run_cli("run", ASKS_TRACE, "-m", "Write the four files.", "--model", f"replay:{script}",
            "--approve", cwd=root)  # no terminal: the first write waits in approval.json
    return root


class Shots:
    """One screenshot per button, numbered in the order clicked, in the test's folder."""

    def __init__(self, tab, folder: Path) -> None:
        self.tab, self.folder, self.taken = tab, folder, []
        folder.mkdir()
        print(f"screenshots: {folder}")

    def take(self, name: str) -> None:
        path = self.folder / f"{len(self.taken):02d}-{name}.png"
        self.tab.screenshot(path=str(path), full_page=True)
        self.taken.append(path)


def _last_commit(root: Path) -> str:
    return git(root, "log", "-1", "--format=%s").strip()


def _stop_a_run(page, served: Served, fake_model, click) -> None:
    """On the held trace: Run, then Stop while the model call waits at the gate."""
    fake, gate = fake_model
    expect = sync_api.expect
    root = served.root
    page.goto(served.url + "#trace=held")
    expect(page.locator("#trace-title")).to_have_text(HELD_TRACE)
    expect(page.locator("#m-2.head")).to_contain_text("Read the meeting note.")
    page.locator("#run").click()
    try:  # a failure here must not leave the server's run waiting for the gate
        fake.wait_for_requests(1, timeout=60)  # the run waits inside its model call
        expect(page.locator("#trace-state")).to_contain_text("running")
        click("stop", page.locator("#stop"))
        expect(page.locator("#confirm-text")).to_have_text("Stop the run after its current step?")
        click("confirm-yes", page.locator("#confirm-yes"))
        expect(page.locator("#notice")).to_have_text("stopping after the current step")
    finally:
        gate.set()
    expect(page.locator("#live-events")).to_contain_text("run finished: stopped")
    expect(page.locator("#m-4.head.role-tool")).to_be_attached()  # the step finished
    expect(page.locator("#trace-state")).to_have_text("idle · head #4")
    assert len(fake.requests) == 1  # no model call after the stop
    assert _last_commit(root).startswith("held: tool #4 ")


def _answer_the_waiting_calls(page, served: Served, click) -> None:
    """On trace `asks`, stopped at a write: Yes runs it, No refuses the next, Always
    runs the third and the fourth unasked."""
    expect = sync_api.expect
    root = served.root
    page.goto(served.url + "#trace=asks")
    expect(page.locator("#trace-title")).to_have_text(ASKS_TRACE)
    box = page.locator("#approval")
    expect(box).to_be_visible()
    expect(page.locator("#approval-tool")).to_have_text("write_file")
    expect(page.locator("#approval-input")).to_contain_text('"path": "asked/yes.txt"')
    click("approve-yes", page.locator("#approve-yes"))
    expect(page.locator("#approval-input")).to_contain_text('"path": "asked/no.txt"')
    assert (root / "asked/yes.txt").read_text() == "yes.txt\n"
    click("approve-no", page.locator("#approve-no"))
    expect(page.locator("#confirm-text")).to_contain_text("Refuse this call?")
    click("confirm-yes", page.locator("#confirm-yes"))
    expect(page.locator("#approval-input")).to_contain_text('"path": "asked/always.txt"')
    click("approve-always", page.locator("#approve-always"))
    expect(page.locator("#live-events")).to_contain_text("run finished: end_turn")
    expect(box).to_be_hidden()
    expect(page.locator("#tree")).to_contain_text("Done asking.")
    assert sorted(p.name for p in (root / "asked").iterdir()) == ["always.txt", "unasked.txt",
                                                                  "yes.txt"]
    assert "asks: approval #" in git(root, "log", "--format=%s")


def _diff_rewind_files_and_fork(page, root: Path, click, shots: Shots) -> None:
    """On the demo at head #12: open #9's diff, rewind to #5 with the files, fork at #5."""
    expect = sync_api.expect
    files = page.locator("#m-9 details.files")
    expect(files.locator("> summary")).to_have_text("Files changed: notes/action-items.md")
    files.locator("> summary").click()  # the diff is fetched now
    expect(files.locator("pre.diff .add").first).to_have_text(
        "+# Action items from the 30 November sync")
    expect(files.locator("pre.diff")).to_contain_text("new file mode 100644")
    shots.take("diff")

    assert (root / "notes/action-items.md").exists()
    click("Rewind with files", page.locator("#m-5 > header .rewind-files"))
    expect(page.locator("#confirm-text")).to_contain_text("put back the workspace files")
    click("confirm-yes", page.locator("#confirm-yes"))
    expect(page.locator("#notice")).to_have_text(
        "head moved from #12 to #5; restored notes/action-items.md")
    expect(page.locator("#m-5")).to_have_class("msg role-tool head")
    assert not (root / "notes/action-items.md").exists()  # the agent wrote it after #5
    assert _last_commit(root) == "demo: rewind #5 head moved to #5 (tool), 1 file restored"
    shots.take("rewind-files")

    click("Fork here", page.locator("#m-5 > header .fork"))
    expect(page.locator("#notice")).to_have_text("forked as demo-fork-1 from #5")
    expect(page.locator("#trace-title")).to_have_text("demo-fork-1")
    expect(page.locator("#m-5.head.role-tool")).to_be_attached()
    expect(page.locator("#m-3")).to_contain_text("I'll plan this")
    assert _last_commit(root) == "demo-fork-1: create #5 forked from demo at #5"
    shots.take("fork")


def _show_older(page, served: Served, click) -> None:
    """A trace longer than a page opens on its last 100 messages; the button reads the
    ones before."""
    long_trace(Project.open(served.root), "long", 120, commit=True)
    page.goto(served.url + "#trace=long")
    sync_api.expect(page.locator("#m-120")).to_contain_text("#120")
    sync_api.expect(page.locator("#m-20")).to_have_count(0)
    click("Show older messages", page.locator("#tree > button.show-older"))
    sync_api.expect(page.locator("#m-1")).to_contain_text("system")
    sync_api.expect(page.locator("#tree > button.show-older")).to_have_count(0)


def _long_traces(page, served: Served, click, shots: Shots) -> None:
    """The buttons that read more of a long trace: older pages, a fold's next page."""
    _show_older(page, served, click)
    shots.take("older")
    _show_more(page, served, click)
    shots.take("fold")


def _show_more(page, served: Served, click) -> None:
    """A long run off the path is a fold, read 100 messages at a time when opened."""
    long_trace(Project.open(served.root), "forked", 140, parents={130: 2}, commit=True)
    page.goto(served.url + "#trace=forked")
    fold = page.locator("#tree > details.fork")
    fold.locator("> summary").click()  # 3-129 left off the path: the first 100 now
    sync_api.expect(page.locator("#m-102")).to_contain_text("#102")
    click("Show more", fold.locator("button.show-more"))
    sync_api.expect(page.locator("#m-129")).to_contain_text("#129")
    sync_api.expect(fold.locator("button.show-more")).to_have_count(0)


def _compress_and_rewind(page, root: Path, click, shots: Shots) -> None:
    """Compress the demo, open the summary's originals, rewind to #12 (asked first)."""
    expect = sync_api.expect
    click("compress", page.locator("#compress"))
    expect(page.locator("#notice")).to_have_text(
        re.compile(r"compressed: summary #19 from agentfs/demo/compression-[0-9a-f]{8}"))
    summary = page.locator("#m-19")
    expect(summary).to_have_class("msg role-user summary head")
    expect(summary).to_contain_text("The user asked for the action items")
    expect(page.locator("#m-12")).to_have_count(0)  # replaced, folded into the summary
    assert mask_branch_bases(_last_commit(root)) == (
        "demo: summary #19 from agentfs/demo/compression-<base>")
    assert len(git(root, "log", "-1", "--format=%P").split()) == 2  # the branch merged
    summary.locator("details.originals > summary").click()
    expect(page.locator("#m-12")).to_contain_text("Done. I wrote")
    shots.take("compress")

    click("Rewind here", page.locator("#m-12 > header .rewind"))
    expect(page.locator("#confirm")).to_be_visible()  # asked first; Cancel changes nothing
    click("confirm-no", page.locator("#confirm-no"))
    expect(page.locator("#confirm")).to_be_hidden()
    assert _last_commit(root).startswith("demo: summary #19 ")
    page.locator("#m-12 > header .rewind").click()
    click("confirm-yes", page.locator("#confirm-yes"))
    expect(page.locator("#notice")).to_have_text("head moved from #19 to #12")
    expect(page.locator("#m-12")).to_have_class("msg role-assistant head")
    expect(page.locator("#m-19")).to_have_count(0)  # off the path now, folded
    assert _last_commit(root).startswith("demo: rewind #12 ")
    shots.take("rewind")


def _search_edit_and_create(page, root: Path, click, shots: Shots) -> None:
    """Search the traces, go to a message found, edit it, compare it with its previous
    text, and create a trace from the page."""
    expect = sync_api.expect
    page.goto(page.url.split("#")[0] + "#trace=demo")
    page.fill("#search-q", "meeting notes")
    click("search", page.locator("#search"))
    hits = page.locator("#search-hits")
    expect(page.locator("#search-summary")).to_contain_text('holding "meeting notes"')
    found = hits.locator("a[href='#trace=demo&message=2']")
    expect(found).to_have_text("demo #2 user")
    expect(hits).to_contain_text("demo-fork-1 #2 user")  # the fork holds it too
    shots.take("search")
    found.click()
    expect(page.locator("#m-2")).to_be_focused()

    click("Edit", page.locator("#m-2 > header .edit"))
    expect(page.locator("#editor-versions")).to_have_text("Not edited since it was written.")
    page.fill("#editor-text", "Read the meeting notes and list the action items.")
    click("editor-save", page.locator("#editor-save"))
    expect(page.locator("#notice")).to_have_text("edited #2 (committed as an edit)")
    expect(page.locator("#m-2")).to_contain_text("list the action items.")
    assert _last_commit(root) == "demo: edit #5 messages/000000-000999/000002-user.md"

    page.locator("#m-2 > header .edit").click()  # its versions: the change, as a diff
    version = page.locator("#editor-versions details.version[open]")
    expect(version.locator("pre.diff .add")).to_have_text(
        "+Read the meeting notes and list the action items.")
    expect(version.locator("pre.diff .del")).to_contain_text("-Read the meeting notes in notes/")
    shots.take("edit-versions")
    click("editor-cancel", page.locator("#editor-cancel"))
    expect(page.locator("#editor")).to_be_hidden()

    page.locator("#new-trace-box > summary").click()
    page.fill("#new-trace-id", "daily")
    page.fill("#new-trace-text", "Summarise notes/ in one line.")
    click("new-trace", page.locator("#new-trace"))
    expect(page.locator("#notice")).to_have_text("created daily: Run starts it")
    expect(page.locator("#trace-title")).to_have_text("daily")
    expect(page.locator("#m-2.head.role-user")).to_contain_text("Summarise notes/ in one line.")
    expect(page.locator("nav a[data-trace=daily] .badge")).to_have_text("idle")
    assert _last_commit(root) == "daily: user #2 Summarise notes/ in one line."
    shots.take("new-trace")


def test_every_button_of_the_page_does_what_it_says_on_the_demo(
        served: Served, page, fake_model, tmp_path):
    expect = sync_api.expect
    root = served.root
    shots = Shots(page, tmp_path / "screenshots")
    seen: set[str] = set()
    clicked: set[str] = set()

    def click(name: str, locator) -> None:
        seen.update(_button_names(page))
        locator.click()
        clicked.add(name)

    test_page.log_in(page, served)  # the address `agentfs serve` printed
    page.goto(served.url + "#trace=demo")
    expect(page.locator("#m-12.head")).to_contain_text("Done. I wrote notes/action-items.md")
    expect(page.locator("#goal-tree")).to_contain_text("Turn the meeting notes into action items")
    shots.take("demo")

    page.fill("#message", "Which action is due first?")
    click("send", page.locator("#send"))
    expect(page.locator("#notice")).to_have_text("posted as #13")
    expect(page.locator("#m-13.head.role-user")).to_contain_text("Which action is due first?")
    assert _last_commit(root) == "demo: user #13 Which action is due first?"
    shots.take("send")

    click("run", page.locator("#run"))
    expect(page.locator("#m-14.head.role-assistant")).to_contain_text(
        "The action items are in notes/action-items.md")
    expect(page.locator("#live-events")).to_contain_text("run finished: end_turn")
    assert _last_commit(root).startswith("demo: assistant #14 Hello.")
    shots.take("run")

    page.fill("#message", "Now list the owners only.")
    click("send-run", page.locator("#send-run"))
    expect(page.locator("#m-16.head.role-assistant")).to_contain_text("The owners: Bo, Chen")
    expect(page.locator("#m-15.role-user")).to_contain_text("Now list the owners only.")
    assert git(root, "log", "-2", "--format=%s").splitlines() == [
        "demo: assistant #16 The owners: Bo, Chen, and everyone for the comments…",
        "demo: user #15 Now list the owners only."]
    shots.take("send-run")

    _compress_and_rewind(page, root, click, shots)

    _diff_rewind_files_and_fork(page, root, click, shots)

    _stop_a_run(page, served, fake_model, click)
    shots.take("stop")
    seen.update(_button_names(page))
    _answer_the_waiting_calls(page, served, click)
    shots.take("approval")
    _search_edit_and_create(page, root, click, shots)
    _long_traces(page, served, click, shots)

    assert seen == CLICKED, "the page shows a button this test does not click"
    assert clicked == CLICKED
    assert [p.name for p in shots.taken][1:] == [
        f"{n:02d}-{name}.png" for n, name in enumerate(
            ["send", "run", "send-run", "compress", "rewind", "diff", "rewind-files", "fork",
             "stop", "approval", "search", "edit-versions", "new-trace", "older", "fold"], 1)]
    assert_git_clean(root)
