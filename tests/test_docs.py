"""Docs keep up with the code: every command documented, every public name listed."""

from __future__ import annotations

import re

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


def test_the_option_reference_is_generated_from_the_commands() -> None:
    """docs/cli.md below its marker is exactly what docs/gen_cli.py writes from the click
    commands, so an option added, renamed or given a new default fails here until the page
    is regenerated."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_cli", ROOT / "docs" / "gen_cli.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    text = (ROOT / "docs" / "cli.md").read_text()
    assert gen.MARKER in text
    assert text == gen.page(), "docs/cli.md is stale: run python docs/gen_cli.py"
    # what the hand-written page once missed is now there, from the commands themselves
    reference = text.split(gen.MARKER)[1]
    for path, option in [("traceview capture lab", "--host"), ("traceview sql", "--force")]:
        section = reference.split(f"### `{path}`")[1].split("### ")[0]
        assert f"`{option}" in section, (path, option)
    for name, command in cli.commands.items():
        assert f"### `traceview {name}`" in reference, name
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--"):
                    assert opt in reference, (name, opt)


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


def test_the_api_page_gives_every_parameter_and_field() -> None:
    """docs/api.md's row for each public name shows its parameters (functions) or fields
    (dataclasses), so the page cannot silently fall behind a signature."""
    import dataclasses
    import inspect

    rows = {}
    for line in (ROOT / "docs" / "api.md").read_text().splitlines():
        for name in re.findall(r"`([A-Za-z_]+)[`(]", line.split("|")[1] if "|" in line else ""):
            rows.setdefault(name, "")
            rows[name] += line
    missing = []
    for name in traceview.__all__:
        obj = getattr(traceview, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            continue
        if dataclasses.is_dataclass(obj):
            wanted = [f.name for f in dataclasses.fields(obj) if not f.name.startswith("_")]
        elif inspect.isfunction(obj):
            wanted = [p for p in inspect.signature(obj).parameters if not p.startswith("_")]
        else:
            continue
        row = rows.get(name, "")
        missing += [f"{name}.{w}" for w in wanted if not re.search(rf"\b{w}\b", row)]
    assert not missing, f"docs/api.md does not show: {', '.join(missing)}"


def test_docstrings_are_written_not_generated() -> None:
    """A dataclass without a docstring gets an automatic one (its signature): not enough."""
    for name in traceview.__all__:
        doc = getattr(traceview, name).__doc__ or ""
        assert doc and not doc.startswith(f"{name}("), name


def test_the_docs_index_lists_every_page_and_the_design_is_in_the_repo() -> None:
    docs = ROOT / "docs"
    index = (docs / "README.md").read_text()
    pages = sorted(p.name for p in docs.glob("*.md") if p.name != "README.md")
    assert "design.md" in pages
    missing = [p for p in pages if f"({p})" not in index]
    assert not missing, f"docs/README.md does not list {missing}"
    # nothing cites the design contract that lives outside the repository
    cited = [
        str(p.relative_to(ROOT))
        for folder in ("traceview", "docs", "fixtures", "tests", "benchmarks")
        for p in (ROOT / folder).rglob("*")
        if p.suffix in (".py", ".md", ".toml")
        and "DESIGN" + ".md" in p.read_text(encoding="utf-8", errors="replace")
    ]
    assert not cited, f"these cite a design file outside the repository: {cited}"


def _sections(text: str) -> dict[str, str]:
    """docs/cli.md's hand-written part, by its ``## traceview CMD`` headings."""
    prose = text.split("<!-- Everything below is generated")[0]
    parts = re.split(r"^## (traceview [a-z]+)\n", prose, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def test_each_commands_usage_in_the_reference_names_every_option() -> None:
    """Issue 33: the usage lines of docs/cli.md's prose are tested against the click
    definitions: each command's section names every option the command takes (by its long
    or short name), where "the analysis options" stands for those the page's introduction
    lists, and "--storage-option" and "--workers" may be said once there for every command
    that reads traces; and no section names an option its command does not take."""
    import click

    text = (ROOT / "docs" / "cli.md").read_text()
    intro = " ".join(text.split("## traceview ")[0].split())
    analysis = set(re.findall(r"--[a-z][a-z-]*", intro.split("The analysis options")[1]))
    everywhere = {o for o in ("--storage-option", "--workers") if o in intro}
    root = click.Context(cli, info_name="traceview")
    missing: list[str] = []
    stray: list[str] = []
    for heading, raw in _sections(text).items():
        body = " ".join(raw.split())
        name = heading.split()[1]
        cmd = cli.commands[name]
        commands = (
            [(c, f"{name} {n}") for n, c in cmd.commands.items()]
            if isinstance(cmd, click.Group)
            else [(cmd, name)]
        )
        said = set(re.findall(r"(?<![\w-])--?[a-zA-Z][a-z-]*", body)) | everywhere
        if "the analysis options" in body:
            said |= analysis
        taken: set[str] = set()
        for c, where in commands:
            for p in c.get_params(click.Context(c, parent=root)):
                if not isinstance(p, click.Option) or "--help" in p.opts:
                    continue
                names = {*p.opts, *p.secondary_opts}
                taken |= names
                if not names & said:
                    missing.append(f"{where}: {max(names, key=len)}")
        if "the analysis options" in body:
            taken |= analysis
        stray += [f"{name}: {o}" for o in sorted(said - taken - everywhere) if o.startswith("--")]
    assert not missing, "docs/cli.md's usage lines leave out:\n" + "\n".join(missing)
    assert not stray, "docs/cli.md names options its commands do not take:\n" + "\n".join(stray)


def test_the_readmes_examples_write_each_output_once() -> None:
    """Run in order from one folder, as a newcomer would, no example's ``-o`` file may be one
    an earlier example wrote: the second refuses ("already exists"). Two heartbeat
    examples both wrote ``hb.png``."""
    text = (ROOT / "README.md").read_text()
    usage = text.split("## Use")[1].split("```sh")[1].split("```")[0]
    outputs = [
        m.group(1)
        for line in usage.splitlines()
        if line.startswith("traceview ")
        for m in [re.search(r"\s-o\s+(\S+)", line.split("#")[0])]
        if m and "://" not in m.group(1)
    ]
    assert len(outputs) >= 6
    assert len(outputs) == len(set(outputs)), outputs


def test_every_deprecated_name_is_listed_with_its_new_one() -> None:
    """docs/api.md's "Deprecated names" table holds every renamed name the code keeps for
    one release, beside its new name."""
    from traceview import _DEPRECATED
    from traceview.analysis.base.document import DEPRECATED_KEYS
    from traceview.model import DEPRECATED_COLUMNS

    page = (ROOT / "docs" / "api.md").read_text()
    table = page.split("## Deprecated names", 1)[1]
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    pairs = [
        *((f"tv.{old}", f"tv.{new}") for old, new in _DEPRECATED.items()),
        *((old, new) for renamed in DEPRECATED_KEYS.values() for old, new in renamed.items()),
        *((f"column `{old}`", f"column `{new}`") for old, new in DEPRECATED_COLUMNS.items()),
    ]
    missing = [(old, new) for old, new in pairs if not any(old in r and new in r for r in rows)]
    assert not missing, missing
