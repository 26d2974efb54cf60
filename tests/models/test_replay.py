"""The replay model: scripts in JSON or YAML, positions from call_index, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentfs.errors import ConfigError, ModelError
from agentfs.models.base import ModelRequest
from agentfs.models.replay import MAX_SCRIPT_BYTES, ReplayModel, load_script
from agentfs.models.resolve import ProviderSettings, resolve_model


def request(index: int, branch: str | None = None) -> ModelRequest:
    return ModelRequest(system="", messages=[], call_index=index, branch_type=branch)


def test_yaml_script_and_branch_lists(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text(
        "turns:\n  - text: first\n    tool_calls:\n      - name: read_file\n"
        "        input: {path: a.md}\n  - text: second\n"
        "compression:\n  - text: summary\n"
    )
    model = ReplayModel(script)
    streamed: list[str] = []
    first = model.complete(request(0), streamed.append)
    assert first.text == "first" and streamed == ["first"]
    assert [(c.id, c.name, c.input) for c in first.tool_calls] == [
        ("toolu_replay_0_0", "read_file", {"path": "a.md"})]
    assert model.complete(request(1)).text == "second"
    assert model.complete(request(0, "compression")).text == "summary"
    exhausted = model.complete(request(2))
    assert "no more 'turns' entries (all 2 used)" in exhausted.text
    assert exhausted.tool_calls == [] and exhausted.stop_reason == "end_turn"
    with pytest.raises(ModelError, match="no more 'reflection' entries"):
        model.complete(request(0, "reflection"))  # a side branch's answer is never a note


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('{"turns": [{"txt": "typo"}]}', "turns.0.txt"),
        ('{"turns": [{"tool_calls": [{"input": {}}]}]}', "turns.0.tool_calls.0.name"),
        ("{not json", "not valid JSON/YAML"),
        ('{"extra_list": []}', "extra_list"),
    ],
)
def test_bad_scripts_name_the_file_and_entry(tmp_path, content, needle):
    script = tmp_path / "bad.json"
    script.write_text(content)
    with pytest.raises(ConfigError) as caught:
        ReplayModel(script)
    assert "bad.json" in str(caught.value) and needle in str(caught.value)


def test_resolve_paths_and_providers(tmp_path):
    (tmp_path / "s.json").write_text('{"turns": []}')
    settings = ProviderSettings()
    assert resolve_model("replay:s.json", base_dir=tmp_path, settings=settings).name == "replay:s.json"
    with pytest.raises(ModelError, match="ANTHROPIC_API_KEY"):
        resolve_model("anthropic:claude-x", base_dir=tmp_path, settings=settings)
    with pytest.raises(ConfigError, match="unknown model provider"):
        resolve_model("nosuch:gpt", base_dir=tmp_path, settings=settings)
    model = resolve_model("anthropic:claude-x", base_dir=tmp_path,
                          settings=ProviderSettings({"anthropic": {"api_key": "k"}}))
    assert model.name == "anthropic:claude-x"


def test_a_replay_script_must_be_a_regular_file_of_bounded_size(tmp_path: Path) -> None:
    """`replay:/dev/zero` (a dropped file may name a model) is refused at once, not
    read until memory runs out; a link to a real script is followed."""
    script = tmp_path / "script.json"
    script.write_text('{"turns": [{"text": "hi"}]}')
    link = tmp_path / "link.json"
    link.symlink_to(script)
    assert load_script(link).turns[0].text == "hi"
    with script.open("ab") as f:
        f.truncate(MAX_SCRIPT_BYTES + 1)  # sparse: no disk used
    with pytest.raises(ConfigError, match="over the"):
        load_script(script)
    with pytest.raises(ConfigError, match="is not a regular file"):
        load_script(Path("/dev/zero"))


def test_a_yaml_replay_script_with_aliases_is_refused_unexpanded(tmp_path: Path) -> None:
    """A script may come with a clone: anchors and aliases could expand a few hundred
    bytes into billions of values."""
    bomb = tmp_path / "bomb.yaml"
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"{chr(98 + n)}: &{chr(98 + n)} [{', '.join(['*' + chr(97 + n)] * 10)}]"
              for n in range(3)]  # 10,000 values if expanded
    bomb.write_text("\n".join(lines) + "\nturns: []\n")
    with pytest.raises(ConfigError, match="not valid JSON/YAML"):
        load_script(bomb)
    fine = tmp_path / "fine.yaml"
    fine.write_text("turns:\n  - text: hi\n")
    assert load_script(fine).turns[0].text == "hi"
