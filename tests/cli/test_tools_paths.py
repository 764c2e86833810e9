"""--tools takes a module in the current directory and a path/to/file.py, with the installed `tether` script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cli_helpers import clean_env

REPO = Path(__file__).resolve().parents[2]
TETHER = Path(sys.executable).parent / "tether"  # the console script: its sys.path[0] is not the cwd
TOOLS = '''
from tether import tool

@tool(read_only=True)
def shout(text: str) -> str:
    """Shout a text."""
    return text.upper()
'''


def tools(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = clean_env(PYTHONPATH=str(REPO / "src"))
    return subprocess.run([str(TETHER), "tools", *argv], cwd=cwd, capture_output=True, text=True, env=env, timeout=60)


def test_a_module_in_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "shouting.py").write_text(TOOLS)
    done = tools("shouting", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("shout (read-only)")


def test_a_path_to_a_file(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "shouting.py").write_text(TOOLS)
    done = tools("lib/shouting.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("shout (read-only)")
    missing = tools("lib/nothing.py", cwd=tmp_path)
    assert missing.returncode == 3
    assert missing.stderr.startswith("error: no toolset file 'lib/nothing.py'")
