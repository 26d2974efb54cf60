"""Claims and pushes against a real git daemon: a lease judged on the judge's own
clock only, leftover claims reaped, and a lost race told from other refusals by
git's porcelain status, whatever git's language."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from agentfs.errors import RemoteError
from agentfs.remote.claims import CLAIMS, SEEN_CLAIMS, Claims, Lease
from agentfs.store.git.remote import GitRemote, RefUpdate
from agentfs.testing.gitserver import GitServer
from tests.conftest import git


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def remote(tmp_path: Path):
    """(bare repository, clone) served by a git daemon, the clone with one commit."""
    with GitServer(tmp_path / "server") as server:
        url = server.create("ws")
        clone = tmp_path / "clone"
        git(tmp_path, "clone", "-q", url, str(clone))
        git(clone, "commit", "-q", "--allow-empty", "-m", "first")
        git(clone, "push", "-q", "origin", "HEAD:main")
        yield server.base / "ws.git", clone


def look(client: GitRemote, claims: Claims):
    client.fetch([f"+{CLAIMS}*:{SEEN_CLAIMS}*"])
    return claims.seen()


def test_a_lease_is_judged_on_the_judges_clock_not_the_holders(remote):
    _, clone = remote
    client = GitRemote(clone, "origin")
    holder = Claims(client, "holder", 30, clock=Clock(time.time() - 86_400))  # a day behind
    assert holder.take("t", None) is not None
    clock = Clock(1_000.0)
    judge = Claims(client, "judge", 30, clock=clock)
    seen = look(client, judge)
    assert judge.free("t", seen) is False  # the holder's clock says nothing
    clock.now += 29
    assert judge.free("t", look(client, judge)) is False
    clock.now += 16  # seen unchanged for one and a half leases: expired for any judge
    assert judge.free("t", look(client, judge)) == seen["t"][0]


def test_a_renewed_claim_counts_from_the_renewal_and_a_new_process_remembers(remote):
    _, clone = remote
    client = GitRemote(clone, "origin")
    holder = Claims(client, "holder", 10)
    held = holder.take("t", None)
    assert held is not None
    clock = Clock(500.0)
    judge = Claims(client, "judge", 10, clock=clock)
    assert judge.free("t", look(client, judge)) is False
    clock.now += 8
    update, held = holder.renewal(held)
    assert client.push([update])
    assert judge.free("t", look(client, judge)) is False  # the renewal, seen at 8 s
    clock.now += 8  # 16 s since the first look, 8 since the renewal was seen
    again = Claims(client, "judge", 10, clock=clock)  # a new process of the same clone
    assert again.free("t", look(client, again)) is False
    clock.now += 8  # 16 s since the renewal: past one and a half leases
    again = Claims(client, "judge", 10, clock=clock)
    assert again.free("t", look(client, again)) == held.sha


def test_each_renewal_is_a_new_claim_commit(remote):
    _, clone = remote
    claims = Claims(GitRemote(clone, "origin"), "w", 10)
    held = claims.take("t", None)
    assert held is not None
    shas = {held.sha}
    for _ in range(3):  # within one second: the counter still makes each one new
        _, held = claims.renewal(held)
        shas.add(held.sha)
    assert len(shas) == 4


def test_a_broken_lease_blocks_no_one(remote):
    assert Lease.parse("not json") is None
    assert Lease.parse('{"worker": "w", "seconds": 0}') is None
    assert Lease.parse('{"worker": "w", "expires": 1764755000.5}') is None  # old format


def test_expired_claims_on_finished_work_are_reaped_and_live_ones_kept(remote):
    bare, clone = remote
    client = GitRemote(clone, "origin")
    dead = Claims(client, "dead", 5)
    assert dead.take("new-0123456789abcdef0123", None) is not None  # its file is gone
    assert dead.take("busy", None) is not None  # there is still work for it
    clock = Clock(100.0)
    judge = Claims(client, "judge", 5, clock=clock)
    assert judge.reap(look(client, judge), wanted={"busy"}) == []  # not expired yet
    clock.now += 10  # two leases: past the point, within them, where this judge reaps
    assert judge.reap(look(client, judge), wanted={"busy"}) == ["new-0123456789abcdef0123"]
    refs = git(bare, "for-each-ref", "--format=%(refname)", CLAIMS)
    assert refs.split() == [CLAIMS + "busy"]


def test_a_lost_race_is_false_and_a_refusal_naming_a_race_phrase_is_an_error(remote):
    bare, clone = remote
    client = GitRemote(clone, "origin")
    main = git(clone, "rev-parse", "HEAD").strip()
    git(clone, "commit", "-q", "--allow-empty", "-m", "second")
    tip = git(clone, "rev-parse", "HEAD").strip()
    # expected a value the ref no longer holds: a lost race
    assert client.push([RefUpdate("refs/heads/main", tip, "0" * 40)]) is False
    # a server hook refusing, in words that happen to contain a race phrase: not a race
    hook = bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'that branch already exists, but expected review' >&2\n"
                    "exit 1\n")
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(RemoteError, match="pre-receive hook declined"):
        client.push([RefUpdate("refs/heads/main", tip, main)])
    hook.unlink()
    assert client.push([RefUpdate("refs/heads/main", tip, main)]) is True


def test_git_speaks_english_to_agentfs_whatever_the_users_language(remote, monkeypatch,
                                                                   tmp_path):
    """Lost races are told by git's words, so git must not translate them: every git
    agentfs runs gets LC_ALL=C, whatever the user's locale."""
    _, clone = remote
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True,
                          check=True).stdout.strip()
    spy = tmp_path / "bin"
    spy.mkdir()
    (spy / "git").write_text(f'#!/bin/sh\necho "$LC_ALL|$LANGUAGE" >> {tmp_path}/env\n'
                             f'exec {real} "$@"\n')
    (spy / "git").chmod(0o755)
    git(clone, "commit", "-q", "--allow-empty", "-m", "second")
    tip = git(clone, "rev-parse", "HEAD").strip()
    monkeypatch.setenv("PATH", f"{spy}:{os.environ['PATH']}")
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    monkeypatch.setenv("LANGUAGE", "de")
    client = GitRemote(clone, "origin")
    assert client.push([RefUpdate("refs/heads/main", tip, "0" * 40)]) is False
    assert set((tmp_path / "env").read_text().split()) == {"C|"}
