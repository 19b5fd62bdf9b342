"""Check a commit message: `area: what changed` in at most 72 characters, then a blank line.

pre-commit runs it at the commit-msg stage with the message file's path
(`.pre-commit-config.yaml`). Exit 1 with one line per fault; 0 when the message is fine.
Merge, revert, fixup and squash messages that git writes itself are let through.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

LIMIT = 72
SUBJECT = re.compile(r"^[A-Za-z0-9_./*{},+-]+(?: [A-Za-z0-9_./*{},+-]+)?: \S")
GENERATED = re.compile(r"^(Merge |Revert \"|fixup! |squash! |amend! )")


def faults(message: str) -> list[str]:
    """The faults of one commit message (its comment lines already removed)."""
    lines = message.splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return ["the message is empty"]
    subject = lines[0]
    if GENERATED.match(subject):
        return []
    found = []
    if len(subject) > LIMIT:
        found.append(f"the subject has {len(subject)} characters; at most {LIMIT}")
    if not SUBJECT.match(subject):
        found.append("the subject does not start with an area: `area: what changed`")
    if subject.rstrip().endswith("."):
        found.append("the subject ends with a full stop")
    if len(lines) > 1 and lines[1].strip():
        found.append("the second line is not blank: the body starts after a blank line")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: commit_msg.py MESSAGE_FILE", file=sys.stderr)
        return 2
    text = Path(argv[1]).read_text(encoding="utf-8", errors="replace")
    message = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    found = faults(message)
    for fault in found:
        print(f"commit message: {fault}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
