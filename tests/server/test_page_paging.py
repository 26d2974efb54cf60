"""The page reads a long trace's tail first and older pages on demand (issue 23), in
Chromium (the fixtures of `tests/server/test_page.py`)."""

from __future__ import annotations

from agentfs.core.project import Project
from agentfs.store.messages import Message, render_message
from tests.conftest import git, long_trace, run_cli
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


def test_the_page_reads_a_summarys_originals_and_a_long_fork_when_opened(
        served: Served, page):  # noqa: F811
    project = Project.open(served.root)
    long_trace(project, "t", 170, parents={130: 2})  # #130 continues #2: 3-129 replaced
    trace = project.trace("t")
    summary = Message(id="m130", sequence=130, parent_sequence=2, role="user",
                      synthetic="summary", content="Summary: what #3-#129 did")
    trace.message_path(summary).write_bytes(render_message(summary))
    git(served.root, "add", "-A")
    git(served.root, "commit", "-q", "-m", "t: 170 messages, #130 a summary")
    with served.client() as client:  # #141-#170 left off the path
        assert client.post("/api/traces/t/rewind", json={"sequence": 140}).status_code == 200
    expect = sync_api.expect
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "first=" in r.url else None)
    log_in(page, served)
    page.goto(served.url + "#trace=t")

    opener = page.locator("#m-130 details.originals > summary")
    expect(opener).to_have_text(
        "Show the 127 messages before this summary (the originals it replaced), #3–#129")
    expect(page.locator("#m-3")).to_have_count(0)
    assert asked == []  # nothing of the fold is read until it is opened
    opener.focus()  # reachable and usable from the keyboard
    page.keyboard.press("Enter")
    expect(page.locator("#m-102")).to_contain_text("#102")
    expect(page.locator("#m-103")).to_have_count(0)
    more = page.locator("#m-130 button.show-more")
    expect(more).to_have_attribute("title", "Read the next 27 of the 27 messages not shown yet")
    more.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#m-129")).to_contain_text("#129")
    expect(more).to_have_count(0)  # all read
    expect(opener).to_be_focused()
    assert [url.split("?")[1] for url in asked] == [
        "first=3&end=130&limit=100", "first=103&end=130&limit=100"]

    fork = page.locator("#tree > details.fork > summary")
    expect(fork).to_have_text("30 messages left off the path (rewound or edited), #141–#170")
    fork.click()
    expect(page.locator("#m-170")).to_contain_text("#170")
    expect(page.locator("#m-141")).to_have_class("msg role-assistant off-path")


def _summarized(served: Served) -> None:
    """Trace `t`: 140 messages, #130 a summary of #3-#129, the head at #140."""
    project = Project.open(served.root)
    long_trace(project, "t", 140, parents={130: 2})
    summary = Message(id="m130", sequence=130, parent_sequence=2, role="user",
                      synthetic="summary", content="Summary: what #3-#129 did")
    project.trace("t").message_path(summary).write_bytes(render_message(summary))
    git(served.root, "add", "-A")
    git(served.root, "commit", "-q", "-m", "t: 140 messages, #130 a summary")


def test_a_live_update_leaves_the_keyboard_where_it_was(served: Served, page):  # noqa: F811
    _summarized(served)
    expect = sync_api.expect
    log_in(page, served)
    with page.expect_response(lambda r: r.url.endswith("/api/traces/t/events")):
        page.goto(served.url + "#trace=t")
    with served.client() as client:  # the page follows the trace: each post redraws it
        client.post("/api/traces/t/messages", json={"text": "first"})
        expect(page.locator("#m-141")).to_contain_text("first")
        opener = page.locator("#m-130 details.originals > summary")
        opener.focus()
        client.post("/api/traces/t/messages", json={"text": "second"})
        expect(page.locator("#m-142")).to_contain_text("second")
        expect(opener).to_be_focused()
        page.keyboard.press("Enter")
        expect(page.locator("#m-102")).to_contain_text("#102")

        page.keyboard.press("j")  # a card focused with j/k stays focused too
        card = page.locator("#tree article.msg:focus")
        expect(card).to_have_count(1)
        focused = card.get_attribute("id")
        client.post("/api/traces/t/messages", json={"text": "third"})
        expect(page.locator("#m-143")).to_contain_text("third")
        expect(page.locator("#" + focused)).to_be_focused()


def test_a_trace_chosen_while_the_list_loads_is_read_once(served: Served, page):  # noqa: F811
    _summarized(served)
    expect = sync_api.expect
    held: list = []
    page.route("**/api/traces", lambda route: held.append(route))  # noqa: PLW0108 -- a bound method is refused
    reads: list[str] = []
    page.on("request", lambda r: reads.append(r.url) if "/tree?" in r.url else None)
    log_in(page, served)
    expect(page.locator("#empty")).to_be_visible()
    page.goto(served.url + "#trace=t")  # chosen before the list came
    expect(page.locator("#m-140")).to_contain_text("#140")
    opener = page.locator("#m-130 details.originals > summary")
    opener.focus()
    assert held  # the list: asked for at the start and after the trace was read
    for route in held:
        route.continue_()
    page.unroute("**/api/traces")
    expect(page.locator("#traces")).to_contain_text("t")
    with served.client() as client:  # a later update: the one read it causes comes after
        client.post("/api/traces/t/messages", json={"text": "first"})
    expect(page.locator("#m-141")).to_contain_text("first")
    assert reads == [reads[0]] * 2  # the trace read, then its update; not read again
    expect(opener).to_be_focused()


def test_a_trace_left_while_it_was_read_is_not_followed(served: Served, page):  # noqa: F811
    for trace in ("a", "b"):
        run_cli("new", trace, "-m", f"hi {trace}", cwd=served.root)
    expect = sync_api.expect
    log_in(page, served)
    held: list = []
    page.route("**/api/traces/a/tree*", lambda route: held.append(route))  # noqa: PLW0108 -- a bound method is refused
    followed: list[str] = []
    page.on("request", lambda r: followed.append(r.url) if r.url.endswith("/events") else None)
    with page.expect_request("**/api/traces/a/tree*"):  # held
        page.goto(served.url + "#trace=a")
    page.goto(served.url + "#trace=b")  # left before it came
    expect(page.locator("#tree")).to_contain_text("hi b")
    assert held
    for route in held:
        route.continue_()
    page.unroute("**/api/traces/a/tree*")
    with served.client() as client:  # an update of b is still shown: b is the one followed
        client.post("/api/traces/b/messages", json={"text": "later for b"})
    expect(page.locator("#tree")).to_contain_text("later for b")
    assert followed and all(url.endswith("/api/traces/b/events") for url in followed), followed
    expect(page.locator("#tree")).not_to_contain_text("hi a")


def test_run_is_enabled_by_a_waiting_file_before_the_list_tells_of_it(
        served: Served, page):  # noqa: F811
    run_cli("new", "t", "-m", "hi", cwd=served.root)
    run_cli("run", "t", cwd=served.root)  # the model answered: nothing to do, but for...
    (served.root / "traces" / "t" / "inbox" / "later.md").write_text("one more thing\n")
    expect = sync_api.expect
    log_in(page, served)
    held: list = []
    page.route("**/api/traces", lambda route: held.append(route))  # noqa: PLW0108 -- a bound method is refused
    page.goto("about:blank")
    page.goto(served.url + "#trace=t")  # a fresh load: the trace is read beside the list
    expect(page.locator("#tree article.head.role-assistant")).to_have_count(1)
    expect(page.locator("#run")).to_be_enabled()  # the tree says a run has work
    for route in held:
        route.continue_()
    page.unroute("**/api/traces")
    expect(page.locator("#traces")).to_contain_text("1 waiting")
    expect(page.locator("#run")).to_be_enabled()


def test_run_is_enabled_by_a_message_file_written_by_hand_and_runs_it(
        served: Served, page):  # noqa: F811
    run_cli("new", "t", "-m", "hi", cwd=served.root)
    run_cli("run", "t", cwd=served.root)  # #3 a call, #4 its result, #5 the model's answer
    expect = sync_api.expect
    log_in(page, served)
    page.goto(served.url + "#trace=t")
    expect(page.locator("#m-5.head.role-assistant")).to_have_count(1)
    expect(page.locator("#run")).to_be_disabled()
    expect(page.locator("#run")).to_have_attribute(
        "title", "nothing to do: the model answered; send a message first")
    folder = served.root / "traces" / "t" / "messages" / "000000-000999"
    (folder / "000006-user.md").write_text("a question written in my editor\n")
    page.reload()  # files written on disk are seen when the trace is read again
    expect(page.locator("#tree")).to_contain_text("1 message left off the path")  # not yet taken
    expect(page.locator("#run")).to_be_enabled()
    page.locator("#run").click()
    expect(page.locator("#m-7.head.role-assistant")).to_have_count(1)
    expect(page.locator("#m-6")).to_contain_text("a question written in my editor")
    expect(page.locator("#run")).to_be_disabled()  # answered: nothing to do again
    kinds = [line.split()[1] for line in run_cli("log", "t", cwd=served.root).stdout.splitlines()]
    assert kinds[:2] == ["assistant", "recover"], kinds


def test_a_rewind_from_the_keyboard_leaves_the_focus_on_its_card(served: Served, page):  # noqa: F811
    _summarized(served)
    expect = sync_api.expect
    log_in(page, served)
    page.goto(served.url + "#trace=t")
    button = page.locator("#m-138 > header button.rewind")
    button.focus()
    page.keyboard.press("Enter")
    page.locator("#confirm-yes").click()
    expect(page.locator("#m-138")).to_have_class("msg role-user head")  # its button went
    expect(page.locator("#m-138")).to_be_focused()
    page.keyboard.press("k")  # the keyboard goes on from there
    expect(page.locator("#m-137")).to_be_focused()
