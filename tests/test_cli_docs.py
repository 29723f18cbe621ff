"""docs/cli.md documents every command (the way sqlite-utils checks its
docs): a ``## convmem NAME`` section for each subcommand and import source,
every option of it named in that section, and its exit codes."""

from __future__ import annotations

import argparse
import os
import re

import pytest

from server.cli import parser

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "cli.md")
GLOBAL = {"-h", "--help", "--store", "--log-level"}


def commands() -> dict[str, argparse.ArgumentParser]:
    """Every command by its full name (``import jsonl`` included)."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(p: argparse.ArgumentParser, prefix: str) -> None:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    found[f"{prefix}{name}"] = child
                    walk(child, f"{prefix}{name} ")
    walk(parser(), "")
    return found


def sections() -> dict[str, str]:
    with open(DOC, encoding="utf-8") as fh:
        text = fh.read()
    parts = re.split(r"^#{2,3} convmem (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


@pytest.mark.parametrize("name", sorted(commands()))
def test_every_command_has_a_section_with_its_options_an_example_and_its_exit_codes(name):
    body = sections().get(name)
    assert body is not None, f"docs/cli.md has no '## convmem {name}' section"
    for action in commands()[name]._actions:
        for option in action.option_strings:
            if option.startswith("--") and option not in GLOBAL:
                assert f"`{option}" in body or f"[{option}" in body or f" {option}" in body, \
                    f"convmem {name}: {option} is not documented"
    if not isinstance(commands()[name]._actions[-1], argparse._SubParsersAction):
        assert "Exit codes" in body, f"convmem {name}: no exit codes"
        assert "    convmem " in body or "    $ convmem " in body, f"convmem {name}: no example"


def test_the_docs_describe_no_command_that_does_not_exist():
    assert set(sections()) <= set(commands())
