"""What `agentfs run` prints while a model call is retried: the answer once on stdout,
one line per retry on stderr."""

from __future__ import annotations

from agentfs.cli.terminal import Terminal

RETRY = {"trace": "t", "attempt": 1, "attempts": 4, "wait": 0.25, "reason": "529 Overloaded"}


def test_a_retried_answer_is_printed_once(capsys):
    terminal = Terminal()
    terminal.text("Hello, ")
    terminal.text("wor")
    terminal.event("retry", RETRY)
    for chunk in ["Hello", ", world", "!"]:
        terminal.text(chunk)
    terminal.event("assistant", {"trace": "t", "sequence": 3, "tool_calls": []})
    out, err = capsys.readouterr()
    assert out == "Hello, world!\n"
    assert err == "\n  [retrying in 0.2s: attempt 1 of 4 failed: 529 Overloaded]\n"


def test_a_retry_that_answers_differently_is_printed_from_its_start(capsys):
    terminal = Terminal()
    terminal.text("Hello, wor")
    terminal.event("retry", RETRY)
    terminal.text("Hi")
    terminal.text(" there")
    terminal.end_line()
    out, err = capsys.readouterr()
    assert out == "Hello, wor\nHi there\n"
    assert "answers differently" in err.splitlines()[-1]


def test_text_of_the_next_turn_is_not_taken_for_a_repeat(capsys):
    terminal = Terminal()
    terminal.text("same")
    terminal.event("assistant", {"trace": "t", "sequence": 3, "tool_calls": ["read_file"]})
    terminal.event("retry", RETRY)  # before any text of the next turn
    terminal.text("same")
    terminal.end_line()
    assert capsys.readouterr().out == "same\nsame\n"


def test_quiet_still_shows_warnings(capsys):
    terminal = Terminal(quiet=True)
    terminal.event("tool_call", {"trace": "t", "name": "read_file", "input": {}})
    terminal.event("retry", RETRY)
    terminal.event("max_tokens", {"trace": "t", "sequence": 3, "max_tokens": 100,
                                  "cut_call": None, "final": True})
    err = capsys.readouterr().err
    assert "read_file" not in err
    assert "[retrying" in err and "cut off at max_tokens (100)" in err
