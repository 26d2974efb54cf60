"""Workspace-level operations: create a workspace, open one, create traces."""

from __future__ import annotations

import os
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfs.config import DEFAULT_CONFIG_TEXT, DEFAULT_MODEL, WorkspaceConfig
from agentfs.core.doctor import config_digest, load_valid_config
from agentfs.core.options import RunnerOptions
from agentfs.core.system_prompt import build_system_prompt
from agentfs.errors import (
    AgentfsError,
    MessageFileError,
    NotDefined,
    TraceExists,
    TraceLocked,
)
from agentfs.models.base import Model
from agentfs.models.resolve import check_model_name, check_untrusted_model
from agentfs.prices import PriceTable
from agentfs.skills import SkillCatalog, SkillError, load_skills
from agentfs.store.atomic import atomic_write
from agentfs.store.commits import Step
from agentfs.store.git.repo import GitRepo, init_repo
from agentfs.store.inbox import Staged, exclude_temp_names
from agentfs.store.ingest import (
    Dropped,
    Rejected,
    SettingsCheck,
    claim_new,
    finish_staged,
    read_staged,
    reject_claim,
)
from agentfs.store.meta import TraceContext
from agentfs.store.trace import Trace, TraceMeta
from agentfs.store.workspace import (
    CONFIG_FILE,
    FOLDERS,
    Workspace,
    find_workspace,
)

if TYPE_CHECKING:
    from agentfs.core.runner import Runner

KEEP = ".gitkeep"


@dataclass
class Project:
    """An open workspace: paths, repository and configuration."""

    workspace: Workspace
    repo: GitRepo
    config: WorkspaceConfig
    #: The SHA-1 of the `agentfs.toml` bytes `config` was read from (`refresh_config`).
    config_seen: str | None = None

    @classmethod
    def open(cls, start: Path | str | None = None) -> Project:
        """The workspace containing `start` (default: the current directory)."""
        workspace = find_workspace(start)
        seen = config_digest(workspace)  # before the read: a change meanwhile is seen later
        config = load_valid_config(workspace)
        return cls(workspace, GitRepo(workspace.root, durable=config.fsync == "all"), config,
                   seen)

    def refresh_config(self) -> bool:
        """Read `agentfs.toml` again if its bytes changed since `config` was read (what a
        long-lived command does before each run); True if they did.

        Raises:
            ConfigError: the changed file is invalid; `config` stays the one read before,
                and the next call reads the file again.
        """
        seen = config_digest(self.workspace)
        if seen == self.config_seen:
            return False
        self.config = load_valid_config(self.workspace)
        self.config_seen = seen
        return True

    def runner(self, model: Model, options: RunnerOptions | None = None, **keywords: Any) -> Runner:
        """A runner of this workspace's traces with `model`.

        Args:
          model: the model the runs call.
          options: how it runs (default: with this workspace's configuration).
          keywords: `RunnerOptions` fields that replace those of `options`.
        """
        from agentfs.core.runner import Runner  # runner.py imports this module

        return Runner(self.workspace, self.repo, model,
                      options or RunnerOptions(config=self.config), **keywords)

    def model_name(self, trace_model: str | None = None, preset: str | None = None,
                   chosen: str | None = None) -> str:
        """The model to use: `chosen` (e.g. `--model`), else the trace's, else its
        preset's, else `model` in agentfs.toml, else the default."""
        presets = self.config.presets
        preset_model = presets[preset].model if preset in presets else None
        return chosen or trace_model or preset_model or self.config.model or DEFAULT_MODEL

    @property
    def prices(self) -> PriceTable:
        """The price table costs are worked out with: `[prices]` over the estimates."""
        return PriceTable(self.config.prices)

    def trace(self, ref: str) -> Trace:
        """An existing trace, by id or by a path to its directory.

        Raises:
            TraceNotFound: there is no such trace.
            MessageFileError: its folder, `traces/` or `messages/` is a symlink
                (`agentfs/store/trace.py:Trace.check_folders`): refused before
                anything is read or written through it.
        """
        trace = Trace(self.workspace, self.repo, self.workspace.resolve_trace(ref))
        trace.check_folders()
        return trace

    def check_settings(self, preset: str | None, inject_skills: Iterable[str]) -> None:
        """`check_trace_settings` against this workspace's config and skills.

        Raises:
            NotDefined: naming the preset or skill and where to define it.
        """
        check_trace_settings(self.config, load_skills(self.workspace.skills_dir), preset,
                             inject_skills)

    def drop_check(self, skills: SkillCatalog | None = None) -> SettingsCheck:
        """The check every door applies to a dropped file's trace settings (see
        `check_trace_settings`)."""
        if skills is None:
            skills = load_skills(self.workspace.skills_dir)
        return settings_check(self.config, skills, self.workspace.root)

    def new_trace(  # noqa: PLR0913 -- keyword-only options, each with its default
        self,
        trace_id: str,
        first_message: Dropped | None,
        *,
        system_prompt: str | None = None,
        explicit_system: str | None = None,
        preset: str | None = None,
        model: str | None = None,
        skills: SkillCatalog | None = None,
        inject_skills: list[str] | None = None,
    ) -> Trace:
        """Create a trace: `trace.json` and the system message (commit `create`), then
        the first user message (commit `user`): `first_message` (read through the
        inbox's door, `agentfs/store/ingest.py:dropped`; the settings its frontmatter
        gives apply where the call gives none), or with None the file claimed for
        this trace in the staging area.

        The system prompt is built once, here (see `build_system_prompt`):
        `explicit_system` (a system message given to the run) wins over
        `system_prompt` (the run's setting), then the preset's.
        """
        skills = skills if skills is not None else load_skills(self.workspace.skills_dir)
        if first_message is not None:
            self.drop_check(skills)(first_message)
            preset = preset or first_message.preset
            model = model or first_message.model
            inject_skills = list(inject_skills or [])
            inject_skills += [s for s in first_message.inject_skills if s not in inject_skills]
        check_trace_settings(self.config, skills, preset, inject_skills or ())
        if model is not None:
            check_model_name(model)  # before anything is written
        self.repo.check_on_main()
        prompt = build_system_prompt(  # before anything is written: it may fail
            self.config, explicit=explicit_system, run_prompt=system_prompt, preset=preset,
            skills=skills,
        )
        meta = TraceMeta(id=trace_id, preset=preset, model=model,
                         context=TraceContext(inject_skills=list(inject_skills or [])))
        existing = Trace(self.workspace, self.repo, trace_id)
        existing.refuse_existing()  # before the lock, which a run of that trace holds
        with existing.lock():  # creators exclude each other
            trace = Trace.create(self.workspace, self.repo, meta)
            system = trace.new_message("system", prompt)
            keep = trace.inbox_dir / KEEP  # so the inbox exists for people to drop files into
            keep.parent.mkdir(parents=True, exist_ok=True)
            keep.write_bytes(b"")
            trace.commit_step("create", [system], summary=f"new trace ({meta.created_at})",
                              extra_paths=[trace.rel(keep)])
            if first_message is None:  # the claimed file that started it (see `start_trace`)
                finish_staged(trace, self.drop_check(skills))
            else:
                user = trace.new_message("user", first_message.content, **first_message.fields)
                trace.commit_step("user", [user])
        return trace

    def start_trace(self, path: Path) -> str | Rejected | None:
        """Start a trace from a file dropped into the workspace `inbox/`, taken exactly
        once (see `agentfs/store/ingest.py:claim_new`); returns its id, what was put
        aside, or None if another process took the file first."""
        claim = claim_new(self.workspace, path)
        if claim is None:
            return None
        return self.create_from_claim(*claim)

    def create_from_claim(self, trace_id: str, staged: Staged) -> str | Rejected | None:
        """Create trace `trace_id` from a claimed file (also after a crash cut a
        creation short). Frontmatter may set `preset`, `model` and `inject_skills`.
        None if another process is creating it; its id if it exists already (its
        next run takes the claim)."""
        origin = self.workspace.root / staged.origin
        try:
            first = read_staged(staged, origin)
            skills = load_skills(self.workspace.skills_dir)  # read once, for both
            self.drop_check(skills)(first)  # before the trace is made: a refusal makes none
            self.new_trace(trace_id, None, preset=first.preset, model=first.model,
                           skills=skills, inject_skills=list(first.inject_skills))
        except TraceExists:
            return trace_id
        except TraceLocked:
            return None
        except AgentfsError as exc:
            if not os.path.lexists(staged.file):
                return None  # another process finished the claim meanwhile
            if self.workspace.trace_dir(trace_id).joinpath("trace.json").exists():
                raise  # created: the claim stays staged and the trace's next run takes it
            rejected = reject_claim(staged, origin, exc)
            with suppress(OSError):  # only if empty: another file may be claiming the id
                os.rmdir(staged.dir.parent)
            return rejected
        return trace_id


def check_trace_settings(config: WorkspaceConfig, skills: SkillCatalog, preset: str | None,
                         inject_skills: Iterable[str]) -> None:
    """Refuse a preset that agentfs.toml does not define, or a skill that is not found.

    Raises:
        NotDefined: naming the preset or skill and where to define it.
    """
    if preset is not None and preset not in config.presets:
        known = ", ".join(config.presets) or "none defined"
        raise NotDefined(
            f"unknown preset {preset!r} (presets: {known})",
            hint=f"define [presets.{preset}] in {CONFIG_FILE}",
        )
    for name in inject_skills:
        try:
            skills.get(name)
        except SkillError as exc:
            raise NotDefined(exc.message, hint=exc.hint) from None


def settings_check(config: WorkspaceConfig, skills: SkillCatalog, root: Path) -> SettingsCheck:
    """`check_trace_settings` for the dropped files a door takes, wherever they go, and
    their model (`agentfs/models/resolve.py:check_untrusted_model`, for the workspace
    `root`): one file is accepted or refused alike by every door. Errors name the file."""
    def check(first: Dropped) -> None:
        try:
            check_trace_settings(config, skills, first.preset, first.inject_skills)
            if first.model is not None:
                check_untrusted_model(first.model, root=root)
        except AgentfsError as exc:
            raise MessageFileError(first.origin, exc.message, hint=exc.hint) from None

    return check


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
        repo.point_unborn_head_at_main()
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
    for name in FOLDERS:
        folder = workspace.root / name
        if not folder.exists():
            folder.mkdir()
            (folder / KEEP).write_bytes(b"")
            created.append(f"{name}/")
            to_commit.append(f"{name}/{KEEP}")
    exclude_temp_names(workspace.root)
    repo = GitRepo(workspace.root)
    try:
        if to_commit:
            repo.commit_worktree(to_commit, Step("", "init", summary="agentfs workspace").message())
    finally:
        repo.close()
    return workspace, created


def _files_below(root: Path) -> list[str]:
    """Every file below `root` outside `.git`, as Git paths."""
    found: list[str] = []
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        found.extend(Workspace(root).relpath(Path(directory) / f) for f in filenames)
    return found
