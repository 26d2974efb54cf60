"""Trees derived from their parent's by `change_tree`, checked against a tree built
from scratch and against the real `git`."""

from __future__ import annotations

import stat

from dulwich.index import commit_tree
from dulwich.objects import Blob, Tree
from dulwich.repo import Repo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfs.store.git.objects import ObjectWriter
from agentfs.store.git.trees import RawTree, change_tree
from tests.conftest import git

NAMES = st.sampled_from(["a", "a.md", "a-b", "a0", "b", "messages", "m.json", "z"])
PATHS = st.lists(NAMES, min_size=1, max_size=3).map("/".join)


def _one_per_path(changes: list) -> list:
    """A commit changes each path once, and never both a path and one below it."""
    kept: dict[str, tuple] = {}
    for change in changes:
        path = change[0]
        for other in list(kept):
            if other == path or other.startswith(path + "/") or path.startswith(other + "/"):
                del kept[other]
        kept[path] = change
    return list(kept.values())


CHANGES = st.lists(
    st.tuples(PATHS, st.one_of(st.none(), st.binary(max_size=8)), st.booleans()),
    min_size=1, max_size=12,
).map(_one_per_path)


def _apply(model: dict[bytes, tuple[int, bytes]], path: bytes, entry) -> None:
    """What a change means: a file replaces whatever was at or above its path."""
    for other in list(model):
        below = other == path or other.startswith(path + b"/")
        above = path.startswith(other + b"/")  # a file where the change needs a folder
        if below or (above and entry is not None):
            del model[other]
    if entry is not None:
        model[path] = entry


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(CHANGES, min_size=1, max_size=3))
def test_change_tree_equals_the_tree_built_from_scratch(tmp_path_factory, batches) -> None:
    root = tmp_path_factory.mktemp("repo")
    repo = Repo.init(str(root))
    writer = ObjectWriter(repo.object_store, root / ".git" / "objects")
    model: dict[bytes, tuple[int, bytes]] = {}
    tree: bytes | None = None
    for batch in batches:
        changes = []
        for path, data, executable in batch:
            mode = 0o100755 if executable else 0o100644
            sha = None
            if data is not None:
                blob = Blob.from_string(data)
                writer.add_object(blob)
                sha = bytes.fromhex(blob.id.decode())
            changes.append((path.encode(), mode, sha))
            _apply(model, path.encode(), None if sha is None else (mode, blob.id))
        tree = change_tree(writer, tree, changes)
        expected = commit_tree(repo.object_store, [(p, s, m) for p, (m, s) in model.items()])
        assert (tree or Tree().id) == expected
    if tree is not None:
        listed = git(root, "ls-tree", "-r", tree.decode())  # git reads what we wrote
        assert len(listed.splitlines()) == len(model)
        git(root, "fsck", "--strict", "--no-dangling")
    repo.close()


def test_raw_tree_sorts_directories_as_git_does() -> None:
    tree = RawTree()
    sha = b"\x11" * 20
    tree.set(b"a.md", 0o100644, sha)
    tree.set(b"a", stat.S_IFDIR, sha)  # sorts as "a/", after "a.md"
    tree.set(b"a-b", 0o100644, sha)
    assert tree.keys == [b"a-b", b"a.md", b"a/"]
    assert tree.get(b"a") == (stat.S_IFDIR, sha)
    tree.remove(b"a")
    assert tree.get(b"a") is None
    assert RawTree.parse(tree.encode()).keys == tree.keys
