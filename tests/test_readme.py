"""Meta-test: CI runs exactly the README's two set-up commands."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_commands():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.+?)\n```", section, re.S)
    assert len(commands) == 2, "the README has exactly two set-up commands"
    ci = (ROOT / ".ci" / "run").read_text()
    for cmd in commands:
        assert cmd.strip() in ci, cmd
