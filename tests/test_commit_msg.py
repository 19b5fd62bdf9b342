"""The commit-msg check (.ci/commit_msg.py) that pre-commit runs on every commit."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("commit_msg", ROOT / ".ci" / "commit_msg.py")
assert _spec is not None and _spec.loader is not None
commit_msg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(commit_msg)


@pytest.mark.parametrize(
    "message",
    [
        "steps: believe a sharp pause at any layer count\n\nwhy",
        "docs/performance.md: one table per benchmark",
        "nsys pftrace: read graph replays",
        "Merge branch 'h49a'",
        "\n\nload: skip leading blank lines",
    ],
    ids=["area", "path-area", "two-areas", "merge", "leading-blank"],
)
def test_good_messages_pass(message: str) -> None:
    assert commit_msg.faults(message) == []


@pytest.mark.parametrize(
    ("message", "fault"),
    [
        ("steps: " + "x" * 70, "the subject has 77 characters; at most 72"),
        ("fixed the steps", "the subject does not start with an area"),
        ("steps: believe a sharp pause.", "the subject ends with a full stop"),
        ("steps: believe a pause\nwhy", "the second line is not blank"),
        ("", "the message is empty"),
    ],
    ids=["long", "no-area", "full-stop", "no-blank", "empty"],
)
def test_bad_messages_fail(message: str, fault: str) -> None:
    assert any(f.startswith(fault) for f in commit_msg.faults(message))


def test_comment_lines_are_not_the_message(tmp_path: Path) -> None:
    msg = tmp_path / "COMMIT_EDITMSG"
    msg.write_text("# Please enter the commit message\nload: read WAL exports\n", encoding="utf-8")
    assert commit_msg.main(["commit_msg.py", str(msg)]) == 0
    msg.write_text("# comment\nread WAL exports\n", encoding="utf-8")
    assert commit_msg.main(["commit_msg.py", str(msg)]) == 1


def test_pre_commit_runs_it_at_the_commit_msg_stage() -> None:
    config = (ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8")
    assert "commit-msg" in config.split("default_install_hook_types:")[1].splitlines()[0]
    hook = config.split("id: commit-msg")[1]
    assert ".ci/commit_msg.py" in hook and "stages: [commit-msg]" in hook
