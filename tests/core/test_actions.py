"""What a person does to a trace between runs (`agentfs/core/actions.py`)."""

from __future__ import annotations

import json

from agentfs.core.actions import post_message
from agentfs.core.project import Project
from tests.conftest import git, user


def test_a_message_posted_while_a_side_queue_is_unfinished_waits_for_the_queue(workspace):
    """Taking it would move the head and abandon the queue (its model calls lost):
    it stays in the inbox, for the run that finishes the queue first."""
    project = Project.open(workspace)
    project.new_trace("t", user("first"))
    meta_path = workspace / "traces/t/trace.json"
    meta = json.loads(meta_path.read_text())
    meta["side_queue"] = {"reason": "compress", "head": meta["head"],
                          "steps": [{"type": "compression", "state": "waiting"}]}
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    git(workspace, "commit", "-qam", "a queue planned, its process gone")
    head = git(workspace, "rev-parse", "HEAD")

    posted = post_message(project.trace("t"), "later", run_holds_it=lambda: False)

    assert posted.status == "queued"
    assert (workspace / posted.file).read_text() == "later"
    assert git(workspace, "rev-parse", "HEAD") == head
    assert json.loads(meta_path.read_text())["side_queue"] is not None
    assert git(workspace, "status", "--porcelain") == f"?? {posted.file}\n"  # it waits
