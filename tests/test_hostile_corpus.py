"""A corpus of hostile files pushed through every door where a file becomes a message:
a trace's inbox (`agentfs run`), the workspace inbox (`agentfs watch`), `agentfs new -f`,
and a file written by hand into `messages/`.

Each file is either taken as exactly the message it says, put aside once with a note,
or left alone (editor files, empty files still being written). Nothing crashes, no
link is followed, nothing blocks the good files beside it, and every trace stays
readable and Git clean.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentfs.cli.commands import cli
from agentfs.core.project import Project
from agentfs.core.runner import Runner
from agentfs.errors import AgentfsError
from agentfs.models.replay import ReplayModel
from agentfs.store.inbox import EMPTY_GRACE, REJECTED_DIR
from agentfs.watch.watcher import Watcher
from tests.conftest import assert_git_clean, git

SECRET = "root:x:0:0:SECRET-OUTSIDE-THE-WORKSPACE"


@dataclass(frozen=True)
class Kind:
    """One hostile file: how to make it, and what must become of it."""

    name: str
    file: str  # the file name to drop it under
    make: Callable[[Path], None]  # writes the file at the given path
    fate: str  # taken | rejected | ignored (never looked at) | waits (stays for later)
    text: str | None = None  # for `taken`: the message text

    def __str__(self) -> str:
        return self.name


def _write(data: str | bytes) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.write_bytes(data.encode() if isinstance(data, str) else data)
    return make


def _link(target: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.symlink_to(target)
    return make


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _hard_link(path: Path) -> None:
    """A hard link to the secret outside the workspace (same filesystem)."""
    secret = next(f / "secret.txt" for f in path.parents if (f / "secret.txt").exists())
    os.link(secret, path)


def _empty_long_ago(path: Path) -> None:
    """An empty file left empty for longer than an editor takes to fill it."""
    path.write_bytes(b"")
    old = time.time() - 2 * EMPTY_GRACE
    os.utime(path, (old, old))


def _folder(path: Path) -> None:
    path.mkdir()
    (path / "inside.md").write_text("in a folder\n")


ALIAS_BOMB = (
    "---\na: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
    "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
    "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n---\nboom\n"
)

KINDS = [
    Kind("plain", "plain.md", _write("hello there\n"), "taken", "hello there"),
    Kind("crlf", "crlf.md", _write("line one\r\nline two\r\n"), "taken", "line one\r\nline two\r"),
    Kind("bom", "bom.md", _write("\ufeffwith a BOM\n"), "taken", "\ufeffwith a BOM"),
    Kind("unicode-controls", "rtl.md", _write("abc \u202e txt.exe \u200b\n"), "taken",
         "abc \u202e txt.exe \u200b"),
    Kind("double-dash-name", "a--b--c.md", _write("dashes\n"), "taken", "dashes"),
    Kind("newline-in-name", "new\nline.md", _write("newline name\n"), "taken", "newline name"),
    Kind("emoji-name", "\U0001f600 smile.md", _write("emoji name\n"), "taken", "emoji name"),
    Kind("long-name", "n" * 240 + ".md", _write("long name\n"), "taken", "long name"),
    Kind("dash-name", "-rf.md", _write("dash first\n"), "taken", "dash first"),
    Kind("yaml-booleans", "yes.md", _write("---\nrole: user\n---\nyes\n"), "taken", "yes"),
    Kind("unknown-keys", "keys.md", _write("---\n" + "".join(f"k{i}: {i}\n" for i in range(10_000))
                                           + "---\nmany keys\n"), "rejected"),
    Kind("bad-preset", "preset.md", _write("---\npreset: [1, 2]\n---\nhi\n"), "rejected"),
    Kind("unknown-preset", "nopreset.md", _write("---\npreset: nope\n---\nhi\n"), "rejected"),
    Kind("unknown-skill", "noskill.md", _write("---\ninject_skills: [nope]\n---\nhi\n"),
         "rejected"),
    Kind("bad-skills", "badskills.md", _write("---\ninject_skills: {a: 1}\n---\nhi\n"),
         "rejected"),
    Kind("hard-link-outside", "linked.md", _hard_link, "rejected"),
    Kind("hidden-name", "..md", _write("hidden\n"), "rejected"),
    Kind("left-empty", "left-empty.md", _empty_long_ago, "rejected"),
    Kind("owned-fields", "owned.md",
         _write("---\ntool_call_id: t1\nsynthetic: context\nsequence: 99999999999\n"
                "id: ../../x\nparent_sequence: 1\n---\nplain again\n"), "taken", "plain again"),
    Kind("json-message", "data.json", _write(json.dumps({"content": "from json"})), "taken",
         "from json"),
    Kind("big-but-fine", "big.md", _write("x" * 200_000 + "\n"), "taken", "x" * 200_000),
    Kind("empty", "empty.md", _write(b""), "waits"),
    Kind("whitespace-only", "blank.md", _write(" \n\t\n  \n"), "rejected"),
    Kind("invalid-utf8", "latin1.md", _write(b"caf\xe9\n"), "rejected"),
    Kind("nul-bytes", "nul.md", _write(b"abc\x00def\n"), "rejected"),
    Kind("utf16", "utf16.md", _write("hello".encode("utf-16")), "rejected"),
    Kind("png", "image.md", _write(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), "rejected"),
    Kind("over-size-limit", "huge.md", _write("y" * (5 * 1024 * 1024)), "rejected"),
    Kind("alias-bomb", "bomb.md", _write(ALIAS_BOMB), "rejected"),
    Kind("plain-alias", "alias.md", _write("---\na: &x 1\nb: *x\n---\nhi\n"), "rejected"),
    Kind("deep-nesting", "deep.md", _write("---\na: " + "[" * 10_000 + "]" * 10_000 + "\n---\nhi\n"),
         "rejected"),
    Kind("deep-json", "deep.json", _write('{"content": ' + "[" * 100_000 + "]" * 100_000 + "}"),
         "rejected"),
    Kind("oversized-header", "header.md",
         _write("---\n" + "".join(f"k{i}: {'v' * 60}\n" for i in range(6000)) + "---\nhi\n"),
         "rejected"),
    Kind("python-tag", "tag.md", _write("---\nx: !!python/object/apply:os.system [id]\n---\nhi\n"),
         "rejected"),
    Kind("unclosed-frontmatter", "unclosed.md", _write("---\na: 1\nno end\n"), "rejected"),
    Kind("frontmatter-list", "list.md", _write("---\n- a\n- b\n---\nhi\n"), "rejected"),
    Kind("malformed-yaml", "malformed.md", _write("---\na: [1, 2\n---\nhi\n"), "rejected"),
    Kind("assistant-role", "role.md", _write("---\nrole: assistant\n---\nI am the model\n"),
         "rejected"),
    Kind("invalid-json", "broken.json", _write("{not json"), "rejected"),
    Kind("json-array", "array.json", _write("[1, 2, 3]"), "rejected"),
    Kind("symlink-outside", "passwd.md", _link("/etc/passwd"), "rejected"),
    Kind("symlink-secret", "secret.md", _link("../../../secret.txt"), "rejected"),
    Kind("dangling-symlink", "dangling.md", _link("/nonexistent/nowhere.md"), "rejected"),
    Kind("vim-swap", ".plain.md.swp", _write("swap"), "ignored"),
    Kind("vim-probe", "4913", _write(""), "ignored"),
    Kind("backup", "plain.md~", _write("backup"), "ignored"),
    Kind("emacs-autosave", "#plain.md#", _write("autosave"), "ignored"),
    Kind("emacs-lock", ".#plain.md", _link("user@host.1234:1"), "ignored"),
    Kind("fifo", "pipe.md", _fifo, "rejected"),
    Kind("folder", "folder.md", _folder, "rejected"),
]


def _ids(kinds: list[Kind]) -> list[str]:
    return [k.name for k in kinds]


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "outside" / "ws"
    root.parent.mkdir()
    (root.parent / "secret.txt").write_text(SECRET + "\n")
    runner = CliRunner()
    assert runner.invoke(cli, ["init", str(root)]).exit_code == 0
    (root / "script.json").write_text(json.dumps({"turns": [{"text": "ok"}] * 200}))
    config = root / "agentfs.toml"
    config.write_text(config.read_text().replace(
        'model = "anthropic:claude-sonnet-4-5"', 'model = "replay:script.json"')
        + "\nsettle = 0\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "setup")
    monkeypatch.chdir(root)  # the commands find the workspace from here
    return root


def _drop_all(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    placed = {}
    for kind in KINDS:
        path = folder / kind.file
        kind.make(path)
        placed[kind.name] = path
    return placed


def _check_fates(folder: Path, placed: dict[str, Path], taken_texts: list[str]) -> None:
    """Each kind met its fate; then the files left alone are cleared away."""
    rejected = folder / REJECTED_DIR
    for kind in KINDS:
        path = placed[kind.name]
        if kind.fate == "taken":
            assert taken_texts.count(kind.text) == 1, kind.name
            assert not os.path.lexists(path), kind.name
        elif kind.fate == "rejected":
            assert not os.path.lexists(path), f"{kind.name} was left in the inbox"
            assert os.path.lexists(rejected / kind.file), f"{kind.name} was not put aside"
            note = (rejected / f"{kind.file}.reason.txt").read_text()
            assert note.startswith(f"{kind.file} was not taken as a message: "), kind.name
        else:
            assert os.path.lexists(path), f"{kind.name} was taken: it must be left alone"
    assert all(SECRET not in t for t in taken_texts), "a symlink was followed"
    for kind in KINDS:
        if kind.fate in ("ignored", "waits"):
            path = placed[kind.name]
            if path.is_dir() and not path.is_symlink():
                (path / "inside.md").unlink()
                path.rmdir()
            else:
                path.unlink()


def test_the_corpus_has_at_least_thirty_kinds():
    assert len(KINDS) >= 30 and len(set(_ids(KINDS))) == len(KINDS)
    assert len({k.file for k in KINDS}) == len(KINDS)


def test_every_kind_through_a_traces_inbox_and_agentfs_run(ws):
    project = Project.open(ws)
    runner = CliRunner()
    assert runner.invoke(cli, ["new", "t", "-m", "start"], catch_exceptions=False).exit_code == 0
    inbox = ws / "traces/t/inbox"
    placed = _drop_all(inbox)
    before = git(ws, "rev-parse", "HEAD")
    Runner(project.workspace, project.repo, ReplayModel(ws / "script.json"),
           config=project.config).run("t")
    assert git(ws, "rev-parse", "HEAD") != before
    trace = Project.open(ws).trace("t")
    texts = [m.text for m in trace.messages().values() if m.role == "user"]
    trace.main_path()  # readable (Level 2 may have summarised the big files)
    _check_fates(inbox, placed, texts)
    shown = runner.invoke(cli, ["show", "t", "--json"], catch_exceptions=False)
    assert shown.exit_code == 0  # the trace stays readable
    assert_git_clean(ws)


def test_every_kind_through_the_workspace_inbox_and_agentfs_watch(ws):
    project = Project.open(ws)
    placed = _drop_all(ws / "inbox")
    events: list[tuple[str, dict]] = []
    Watcher(project, lambda model, preset: ReplayModel(ws / "script.json"),
            lambda e, d: events.append((e, d)), settle=0).run_once()
    reopened = Project.open(ws)
    firsts = []
    for trace_id in reopened.workspace.trace_ids():
        path = reopened.trace(trace_id).main_path()
        firsts.append(path[1].text)
        assert path[-1].role == "assistant"  # every new trace was answered
    _check_fates(ws / "inbox", placed, firsts)
    rejected = [d for e, d in events if e == "rejected"]
    assert len(rejected) == sum(k.fate == "rejected" for k in KINDS)  # each logged once
    assert not [e for e, _ in events if e == "error"]
    assert_git_clean(ws)


@pytest.mark.parametrize("kind", [k for k in KINDS if k.fate in ("taken", "rejected")
                                  and k.name != "hidden-name"],  # a name counts in inboxes only
                         ids=str)
def test_every_kind_through_agentfs_new_dash_f(ws, tmp_path, kind):
    source = tmp_path / "outside" / kind.file.replace("\n", "_")
    kind.make(source)
    before = git(ws, "rev-parse", "HEAD")
    result = CliRunner().invoke(cli, ["new", "n", "-f", str(source)])
    if kind.fate == "taken":
        assert result.exit_code == 0, result.output
        assert Project.open(ws).trace("n").main_path()[1].text == kind.text
    elif result.exit_code == 2:  # click refuses a dangling link or a folder
        assert ("does not exist" in result.output or "is a directory" in result.output)
        assert source.name in result.output
    else:
        assert isinstance(result.exception, AgentfsError), repr(result.exception)
        assert str(source) in str(result.exception)  # names the file
        assert git(ws, "rev-parse", "HEAD") == before  # nothing committed
        assert not (ws / "traces/n").exists()
    assert_git_clean(ws)


@pytest.mark.parametrize("kind", [k for k in KINDS if k.fate in ("taken", "rejected")
                                  and k.file.endswith(".md")
                                  and k.make not in (_fifo, _folder, _hard_link)],
                         ids=str)
def test_every_kind_written_by_hand_into_messages(ws, kind):
    project = Project.open(ws)
    project.new_trace("h", project_user("start"))
    target = ws / "traces/h/messages/000000-000999/000003-user.md"
    kind.make(target)
    before = git(ws, "rev-parse", "HEAD")
    trace = Project.open(ws).trace("h")
    try:
        with trace.lock():
            kinds = trace.recover()
    except AgentfsError as exc:
        assert "000003-user.md" in str(exc)  # names the file
        assert git(ws, "rev-parse", "HEAD") == before  # nothing committed
        assert "Traceback" not in str(exc)
        assert SECRET not in str(exc)
        os.unlink(target)
    else:
        assert kinds == ["recover"], kinds
        adopted = Project.open(ws).trace("h").main_path()[-1]
        assert SECRET not in adopted.text
        assert_git_clean(ws)


def project_user(text: str):
    from tests.conftest import user

    return user(text)
