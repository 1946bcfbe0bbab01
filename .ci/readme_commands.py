"""Print one of the README's two quick-start commands: ``python .ci/readme_commands.py test|main``.

The quick start is the first ```bash block under '## Quick start' in README.md: exactly two commands, one running
the tests (pytest), one running the main job (rpn2c train). CI reads them from here so the two can never drift.
The ```sh block before it makes the reader's virtualenv; CI makes a fresh one for each command itself.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def quick_start(text: str) -> dict[str, str]:
    """{'main': command, 'test': command} from the README text; ValueError when the block is not as documented."""
    section = re.search(r"^## Quick start\n(.*?)(?=^## )", text, re.S | re.M)
    if section is None:
        raise ValueError("README.md has no '## Quick start' section")
    block = re.search(r"^```bash\n(.*?)^```", section[1], re.S | re.M)
    if block is None:
        raise ValueError("the quick start has no ```bash block")
    commands = [ln.strip() for ln in block[1].splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if len(commands) != 2:
        raise ValueError(f"the quick start must hold exactly two commands, found {len(commands)}")
    roles = {"test": [c for c in commands if "pytest" in c], "main": [c for c in commands if "rpn2c train" in c]}
    if any(len(v) != 1 for v in roles.values()):
        raise ValueError("the quick start needs one pytest command and one 'rpn2c train' command")
    return {k: v[0] for k, v in roles.items()}


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("test", "main"):
        sys.exit("usage: python .ci/readme_commands.py test|main")
    print(quick_start(README.read_text(encoding="utf-8"))[sys.argv[1]])
