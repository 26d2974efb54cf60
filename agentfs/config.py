"""`agentfs.toml`: the workspace configuration."""

from __future__ import annotations

import difflib
import re
import shlex
import tomllib
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from agentfs.errors import ConfigError, validation_problems
from agentfs.prices import Price
from agentfs.store.regularfile import FileRefused, read_config_file

DEFAULT_MODEL = "anthropic:claude-sonnet-4-5"
#: Default number of iterations between `get_current_context` injections.
CONTEXT_INJECTION_INTERVAL = 5

DEFAULT_CONFIG_TEXT = f'''\
# agentfs workspace configuration. `agentfs doctor` checks this file; every key
# is described in docs/configuration.md of agentfs's source.
format = 1

# Model used when `agentfs run` gets no --model:
#   "anthropic:<model-id>"  needs ANTHROPIC_API_KEY in the environment
#   "openai:<model-id>"     an OpenAI-compatible server: the [openai] extra installed,
#                           OPENAI_API_KEY (and OPENAI_BASE_URL beside OpenAI's own)
#   "replay:<path>"         a scripted, offline model (path relative to this file)
model = "{DEFAULT_MODEL}"

# Model calls per `agentfs run` before it stops (run again to continue).
max_iterations = 50

# Uncomment to let the model run shell commands (in a bubblewrap sandbox, no network)
# and to be asked before any tool call that may change something:
# [tools]
# bash = true
# approve = "acting"
'''


class Preset(BaseModel):
    """A named bundle of settings for new traces (`agentfs new/run --preset NAME`)."""

    model_config = ConfigDict(extra="forbid")

    system_prompt: str | None = Field(default=None, description="Role prompt for new traces")
    model: str | None = Field(default=None, description="Model for traces of this preset")
    skills: list[str] | None = Field(
        default=None, description="Skills listed in the system prompt (default: all)"
    )


#: Control folders and files: the model reads them through tools but never writes them.
DEFAULT_READ_ONLY = ("agentfs.toml", "inbox", "traces", "knowledge", "skills")


class ToolsConfig(BaseModel):
    """Tool policy."""

    model_config = ConfigDict(extra="forbid")

    bash: bool = Field(default=False, description="Offer the bash tool (off by default)")
    approve: Literal["acting", "none"] = Field(
        default="none",
        description="acting: calls of tools that may change something (bash, write_file, "
        "edit_file, delegate, tools not declared read-only) wait for your yes, no or always; "
        "none: every call runs unasked. --approve/--no-approve override it",
    )
    bash_timeout: float = Field(default=60.0, gt=0, description="Seconds before a command is killed")
    bash_output_limit: int = Field(default=30_000, ge=100, description="Characters of output kept")
    bash_sandbox: Literal["auto", "bwrap", "none"] = Field(
        default="auto",
        description="auto or bwrap: run bash only in a bubblewrap sandbox, and refuse bash "
        "calls where `bwrap` does not work; none: no sandbox (said at start)",
    )
    bash_max_processes: int = Field(
        default=256, ge=1,
        description="Processes and threads a bash command may start (not applied when "
        "agentfs runs as root: the kernel exempts root)",
    )
    bash_max_memory_mb: int = Field(
        default=8192, ge=64, description="Address space of each process of a bash command, in MB"
    )
    bash_max_file_mb: int = Field(
        default=1024, ge=1, description="Largest file a bash command may write, in MB"
    )
    bash_network: Literal["none", "host"] = Field(
        default="none",
        description="none: sandboxed commands have no network; host: they share the "
        "machine's, loopback services (agentfs serve) included (said at start)",
    )
    read_only: list[str] = Field(
        default_factory=lambda: list(DEFAULT_READ_ONLY),
        description="Workspace paths the file tools (and bash in its sandbox) may read but not change (folders cover "
        "everything below them); `.git` is always read-only",
    )


class KnowledgeConfig(BaseModel):
    """Reflection: lessons saved as knowledge items."""

    model_config = ConfigDict(extra="forbid")

    enable_extraction: bool = Field(
        default=False, description="Reflect on a side branch before each Level 2 compression"
    )
    enable_completion_extraction: bool = Field(
        default=False, description="Reflect when the model finishes a task"
    )


#: The least `budget_tokens` the Messages API accepts for extended thinking.
MIN_THINKING_BUDGET = 1024


class ThinkingConfig(BaseModel):
    """Extended thinking: the model reasons in thinking blocks before it answers."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=False, description="Ask the model to think before each answer")
    budget_tokens: int = Field(
        default=2048, ge=MIN_THINKING_BUDGET,
        description="Tokens the model may spend thinking; they count toward max_tokens, so "
        "the budget must be less than max_tokens",
    )


class HookConfig(BaseModel):
    """A context-injection hook: a shell command whose output is injected. It runs only
    once the person trusted this workspace's commands (`agentfs trust`, docs/security.md)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    command: str
    timeout: float = Field(default=10.0, gt=0)


#: What an MCP server's name may hold: its tools are offered as `<server>__<tool>`, and
#: the Messages API takes tool names of `[a-zA-Z0-9_-]` only.
MCP_SERVER_NAME = r"^[a-zA-Z0-9-]+(_[a-zA-Z0-9-]+)*\Z"  # \Z: `$` lets a final line break through
#: What an environment variable's name may hold.
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*\Z"


class McpServerConfig(BaseModel):
    """An MCP server whose tools runs offer (`[mcp_servers.NAME]`): a command agentfs
    starts and talks to over stdio, or a URL it reaches over streamable HTTP. It is
    used only once the person trusted this workspace's commands (`agentfs trust`)."""

    model_config = ConfigDict(extra="forbid")

    command: list[str] | None = Field(
        default=None, min_length=1,
        description="stdio: the program and its arguments, e.g. [\"npx\", \"-y\", \"server\"]; "
        "it runs in the workspace's root folder")
    env: list[str] = Field(
        default_factory=list,
        description="stdio: names of environment variables passed on to the command (their "
        "values come from agentfs's environment; a few safe ones such as PATH and HOME always are)")
    url: str | None = Field(
        default=None, pattern=r"^https?://",
        description="Streamable HTTP: the server's endpoint, e.g. https://example.com/mcp")
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="HTTP: header name = the environment variable holding its value "
        "(`Authorization = \"MY_TOKEN\"` sends `Authorization: <$MY_TOKEN>`)")
    timeout: float = Field(default=60.0, gt=0,
                           description="Seconds a tool call may take before it fails")
    startup_timeout: float = Field(default=30.0, gt=0,
                                   description="Seconds the server may take to start")

    @field_validator("env")
    @classmethod
    def _env_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.match(ENV_NAME, name):
                raise ValueError(f"{name!r} is not an environment variable's name")
        return names

    @field_validator("headers")
    @classmethod
    def _header_variables(cls, headers: dict[str, str]) -> dict[str, str]:
        for header, name in headers.items():
            if not re.match(ENV_NAME, name):
                raise ValueError(
                    f"the value of {header!r} must name an environment variable (the header's "
                    f"value is read from it), not {name!r}: write the secret in the environment")
        return headers

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either `command` (a stdio server) or `url` (an HTTP "
                             "server), not both or neither")
        if self.command is not None and self.headers:
            raise ValueError("`headers` are for HTTP servers (`url`)")
        if self.url is not None and self.env:
            raise ValueError("`env` is for stdio servers (`command`); an HTTP server's "
                             "secrets go in `headers`")
        return self

    @property
    def target(self) -> str:
        """The command line it runs, or the URL it is at, as messages show it."""
        return shlex.join(self.command) if self.command is not None else str(self.url)

    def variables(self) -> list[str]:
        """The environment variables this server takes values from."""
        return [*self.env, *self.headers.values()]


class WorkspaceConfig(BaseModel):
    """Settings from `agentfs.toml`; every key is optional."""

    model_config = ConfigDict(extra="forbid")

    format: int = 1
    model: str | None = Field(default=None, description="Default model, e.g. replay:PATH")
    max_iterations: int = Field(default=50, ge=1, description="Model calls per run")
    system_prompt: str | None = Field(default=None, description="Role prompt for new traces")
    max_tokens: int = Field(default=4096, ge=1, description="Output tokens per model call")
    request_timeout: float = Field(
        default=600.0, gt=0,
        description="Seconds a model request may take before it fails (and is retried)",
    )
    context_injection_interval: int = Field(
        default=CONTEXT_INJECTION_INTERVAL,
        ge=1,
        description="Iterations between get_current_context injections",
    )
    goal_compression: Literal["none", "on_complete", "on_overflow"] = Field(
        default="on_overflow", description="Level 1 compression of finished goals' details"
    )
    context_window: int = Field(default=200_000, ge=1000, description="Tokens, for any model")
    context_windows: dict[str, int] = Field(
        default_factory=dict, description="Per-model context windows, by model name"
    )
    compression_threshold: float = Field(
        default=0.5, gt=0, le=1, description="Compress when a request exceeds window × this"
    )
    presets: dict[str, Preset] = Field(default_factory=dict)
    prices: dict[str, Price] = Field(
        default_factory=dict, description="Prices by model name, over the built-in "
        "estimates (`agentfs/core/usage.py:DEFAULT_PRICES`)",
    )
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    context_hooks: list[HookConfig] = Field(default_factory=list)
    knowledge: KnowledgeConfig = Field(default_factory=KnowledgeConfig)
    settle: float = Field(
        default=1.0, ge=0, le=60,
        description="Seconds a file dropped into an inbox must stay unchanged before it is taken",
    )
    max_delegation_depth: int = Field(default=2, ge=0, description="Nesting of delegate calls")
    fsync: Literal["files", "all"] = Field(
        default="files",
        description="files: fsync each file agentfs writes before its rename; "
        "all: also every Git object, ref, index and directory change (survives power loss)",
    )
    thinking: ThinkingConfig = Field(default_factory=ThinkingConfig)
    mcp_servers: dict[str, McpServerConfig] = Field(
        default_factory=dict, description="MCP servers whose tools runs offer, by name")

    @field_validator("mcp_servers")
    @classmethod
    def _server_names(cls, servers: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        """A name becomes the prefix of tool names: letters, digits, `-` and single `_`."""
        for name in servers:
            if not re.match(MCP_SERVER_NAME, name) or len(name) > 32:
                raise PydanticCustomError(
                    "mcp_server_name",
                    "'{name}' cannot name an MCP server: use at most 32 letters, digits, '-' "
                    "and single '_' (its tools are offered as <server>__<tool>)",
                    {"name": name},
                )
        return servers

    @field_validator("thinking")
    @classmethod
    def _budget_below_max_tokens(cls, thinking: ThinkingConfig,
                                 info: ValidationInfo) -> ThinkingConfig:
        """The API refuses a thinking budget that leaves no room for the answer."""
        max_tokens = info.data.get("max_tokens")
        if thinking.enabled and max_tokens is not None and thinking.budget_tokens >= max_tokens:
            raise PydanticCustomError(
                "thinking_budget",
                "budget_tokens ({budget}) must be less than max_tokens ({max_tokens}): the "
                "thinking counts toward max_tokens; raise max_tokens or lower the budget",
                {"budget": thinking.budget_tokens, "max_tokens": max_tokens},
            )
        return thinking

    @property
    def thinking_budget(self) -> int | None:
        """`budget_tokens` when extended thinking is on, else None."""
        return self.thinking.budget_tokens if self.thinking.enabled else None

    def with_thinking(self, budget: int | None) -> WorkspaceConfig:
        """This configuration with extended thinking on with `budget` tokens, or off (None):
        what `agentfs run --thinking BUDGET` / `--no-thinking` run with.

        Raises:
            ConfigError: the budget is below 1024 or not below `max_tokens`.
        """
        data: dict[str, Any] = self.model_dump()
        data["thinking"] = ({"enabled": False} if budget is None
                            else {"enabled": True, "budget_tokens": budget})
        try:
            return WorkspaceConfig.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(validation_problems(exc)) from None

    def token_limit(self, model_name: str) -> int:
        """Input tokens above which a request to `model_name` is compressed."""
        window = self.context_windows.get(model_name, self.context_window)
        return int(window * self.compression_threshold)


def load_config(path: Path) -> WorkspaceConfig:
    """Parse `agentfs.toml`; errors name the file and the key."""
    try:
        data = tomllib.loads(read_config_file(path).decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist", hint="run `agentfs init`") from None
    except FileRefused as exc:
        raise ConfigError(exc.message, hint=exc.hint) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: invalid TOML ({exc})") from None
    try:
        return WorkspaceConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {validation_problems(exc, _did_you_mean)}") from None


def _did_you_mean(error: Any) -> str | None:
    """For an unknown key, the known key of its table it most resembles, else the
    table one level down or up where that key is known (`_misplaced`)."""
    if error["type"] != "extra_forbidden":
        return None
    *table, key = error["loc"]
    close = difflib.get_close_matches(str(key), _known_keys(table), n=1)
    return f"did you mean {close[0]!r}?" if close else _misplaced(table, str(key))


def _misplaced(table: list[str | int], key: str) -> str | None:
    """Where `key`, unknown in `table`, belongs when a table inside it or the one
    around it knows it: the common slips of a key left above its `[table]` line, or
    written below one (in TOML every key after `[tools]` belongs to `tools`)."""
    for name in _known_keys(table):
        if key in _known_keys([*table, name]):
            inner = ".".join(map(str, [*table, name]))
            return f"{key!r} is a key of [{inner}]: write it below the `[{inner}]` line"
    if table and key in _known_keys(table[:-1]):
        here = ".".join(map(str, table))
        where = (f"in [{'.'.join(map(str, table[:-1]))}]" if len(table) > 1
                 else "at the top of the file, above the first [table] line")
        return (f"{key!r} belongs {where}: every key after the `[{here}]` line "
                f"belongs to [{here}]")
    return None


def _known_keys(location: list[str | int]) -> list[str]:
    """The keys of the table at `location` (e.g. ["presets", "x"] → a preset's keys)."""
    model: Any = WorkspaceConfig
    for part in location:
        if isinstance(model, type) and issubclass(model, BaseModel):
            field_info = model.model_fields.get(str(part))
            model = field_info.annotation if field_info is not None else None
        else:  # dict[str, X] or list[X]: the part is a key or an index
            args = typing.get_args(model)
            model = args[-1] if args else None
    if isinstance(model, type) and issubclass(model, BaseModel):
        return list(model.model_fields)
    return []
