"""Docs keep up with the code: every command documented, every public name listed."""

from __future__ import annotations

from click.testing import CliRunner
from conftest import ROOT

import traceview
from traceview.cli import cli


def test_every_command_is_in_the_cli_reference() -> None:
    text = (ROOT / "docs" / "cli.md").read_text()
    for name in cli.commands:
        assert f"## traceview {name}" in text, name
        help_text = CliRunner().invoke(cli, [name, "--help"]).stdout
        assert cli.commands[name].help and help_text.strip()


def test_every_public_name_is_in_the_api_page() -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    for name in traceview.__all__:
        assert f"`{name}" in text, name


def test_every_public_function_has_a_docstring() -> None:
    for name in traceview.__all__:
        assert getattr(traceview, name).__doc__, name


def test_readme_has_exactly_two_setup_commands() -> None:
    text = (ROOT / "README.md").read_text()
    setup = text.split("## Set up on a fresh machine")[1].split("\n## ")[0]
    commands = [line for line in setup.splitlines() if line.startswith("python3 -m venv")]
    assert len(commands) == 2
    assert "pytest" in commands[1]
    assert "traceview summarize" in commands[0] and "traceview heartbeat" in commands[0]
