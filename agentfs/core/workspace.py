"""Workspace-level operations: create a workspace, open one, create traces."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from agentfs.config import DEFAULT_CONFIG_TEXT, WorkspaceConfig, load_config
from agentfs.core.system_prompt import build_system_prompt
from agentfs.errors import AgentfsError
from agentfs.skills import SkillCatalog, load_skills
from agentfs.store.atomic import atomic_write
from agentfs.store.commits import Step
from agentfs.store.gitrepo import GitRepo, init_repo
from agentfs.store.messages import Message, authored_fields
from agentfs.store.trace import Trace, TraceMeta
from agentfs.store.workspace import (
    CONFIG_FILE,
    INBOX_DIR,
    KNOWLEDGE_DIR,
    SKILLS_DIR,
    TRACES_DIR,
    Workspace,
    find_workspace,
)

KEEP = ".gitkeep"


@dataclass
class Project:
    """An open workspace: paths, repository and configuration."""

    workspace: Workspace
    repo: GitRepo
    config: WorkspaceConfig

    @classmethod
    def open(cls, start: Path | str | None = None) -> Project:
        """The workspace containing `start` (default: the current directory)."""
        workspace = find_workspace(start)
        config = load_config(workspace.config_path)
        return cls(workspace, GitRepo(workspace.root, durable=config.fsync == "all"), config)

    def trace(self, ref: str) -> Trace:
        """An existing trace, by id or by a path to its directory."""
        return Trace(self.workspace, self.repo, self.workspace.resolve_trace(ref))

    def new_trace(
        self,
        trace_id: str,
        first_message: Message,
        *,
        system_prompt: str | None = None,
        explicit_system: str | None = None,
        preset: str | None = None,
        model: str | None = None,
        skills: SkillCatalog | None = None,
        inject_skills: list[str] | None = None,
    ) -> Trace:
        """Create a trace: `trace.json` and the system message (commit `create`), then
        the first user message (commit `user`).

        The system prompt is built once, here (see `build_system_prompt`):
        `explicit_system` (a system message given to the run) wins over
        `system_prompt` (the run's setting), then the preset's.
        """
        if preset is not None and preset not in self.config.presets:
            known = ", ".join(self.config.presets) or "none defined"
            raise AgentfsError(
                f"unknown preset {preset!r} (presets: {known})",
                hint=f"define [presets.{preset}] in {CONFIG_FILE}",
            )
        self.repo.check_on_main()
        prompt = build_system_prompt(  # before anything is written: it may fail
            self.config, explicit=explicit_system, run_prompt=system_prompt, preset=preset,
            skills=skills if skills is not None else load_skills(self.workspace.skills_dir),
        )
        for name in inject_skills or []:
            (skills if skills is not None else load_skills(self.workspace.skills_dir)).get(name)
        context = {"inject_skills": list(inject_skills)} if inject_skills else {}
        meta = TraceMeta(id=trace_id, preset=preset, model=model, context=context)
        with Trace(self.workspace, self.repo, trace_id).lock():  # creators exclude each other
            trace = Trace.create(self.workspace, self.repo, meta)
            system = trace.new_message("system", prompt)
            keep = trace.inbox_dir / KEEP  # so the inbox exists for people to drop files into
            keep.parent.mkdir(parents=True, exist_ok=True)
            keep.write_bytes(b"")
            trace.commit_step("create", [system], summary=f"new trace ({meta.created_at})",
                              extra_paths=[trace.rel(keep)])
            user = trace.new_message("user", first_message.content, **authored_fields(first_message))
            trace.commit_step("user", [user])
        return trace


def init_workspace(directory: Path, *, commit_existing: bool = False) -> tuple[Workspace, list[str]]:
    """Make `directory` a workspace; returns it and what was created.

    On an existing repository or workspace only missing pieces are added;
    nothing that exists is overwritten. With `commit_existing`, files already
    in a new repository's directory go into the first commit too.
    """
    directory.mkdir(parents=True, exist_ok=True)
    created: list[str] = []
    new_repo = init_repo(directory)
    workspace = Workspace(directory.resolve())
    repo = GitRepo(workspace.root)
    try:
        _point_unborn_head_at_main(repo)
        repo.check_on_main()  # before writing anything
    finally:
        repo.close()
    to_commit: list[str] = []
    if new_repo:
        created.append(".git")
        if commit_existing:
            to_commit.extend(_files_below(workspace.root))
    if not workspace.config_path.exists():
        atomic_write(workspace.config_path, DEFAULT_CONFIG_TEXT.encode())
        created.append(CONFIG_FILE)
        to_commit.append(CONFIG_FILE)
    for name in (SKILLS_DIR, TRACES_DIR, INBOX_DIR, KNOWLEDGE_DIR):
        folder = workspace.root / name
        if not folder.exists():
            folder.mkdir()
            (folder / KEEP).write_bytes(b"")
            created.append(f"{name}/")
            to_commit.append(f"{name}/{KEEP}")
    repo = GitRepo(workspace.root)
    try:
        if to_commit:
            repo.commit_worktree(to_commit, Step("", "init", summary="agentfs workspace").message())
    finally:
        repo.close()
    return workspace, created


def _point_unborn_head_at_main(repo: GitRepo) -> None:
    """A repository with no commits yet (e.g. on `master`) is switched to `main`."""
    target = repo.repo.refs.read_ref(b"HEAD") or b""
    if target.startswith(b"ref: ") and repo.head(target[5:]) is None and repo.head() is None:
        repo.repo.refs.set_symbolic_ref(b"HEAD", b"refs/heads/main")


def _files_below(root: Path) -> list[str]:
    """Every file below `root` outside `.git`, as Git paths."""
    found = []
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        found.extend(Workspace(root).relpath(Path(directory) / f) for f in filenames)
    return found
