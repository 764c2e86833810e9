"""tether.core is sans-IO: no event loop, no network, no database, no clock (DESIGN.md §2)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tether.core

CORE_DIR = Path(tether.core.__file__).parent
FORBIDDEN_MODULES = ("asyncio", "aiohttp", "httpx", "sqlite3", "socket")

# Reads of the clock in code; "time." inside prose is followed by a space or a newline, not a name.
CLOCK_READ = re.compile(r"\btime\.\w|\bimport time\b|\bfrom time import\b|\bdatetime\.(now|utcnow|today)\b")


def loaded_after_import(statement: str) -> list[str]:
    """Which forbidden modules a fresh interpreter holds after running ``statement``."""
    probe = (
        f"import json, sys\n{statement}\nprint(json.dumps([m for m in {FORBIDDEN_MODULES!r} if m in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def core_sources() -> list[Path]:
    files = sorted(CORE_DIR.glob("*.py"))
    assert CORE_DIR / "machine.py" in files
    return files


@pytest.mark.parametrize(
    "statement", ["import tether.core", "from tether.core import machine, messages, budget, envelope, errors"]
)
def test_importing_core_loads_no_io_module(statement: str) -> None:
    assert loaded_after_import(statement) == []


def test_the_probe_sees_an_io_import() -> None:
    # The probe above must be able to fail: tether.tools runs tools under asyncio.
    assert "asyncio" in loaded_after_import("import tether.core, tether.tools")


@pytest.mark.parametrize("path", core_sources(), ids=lambda p: p.name)
def test_core_source_reads_no_clock(path: Path) -> None:
    source = path.read_text(encoding="utf-8")

    assert CLOCK_READ.findall(source) == []


@pytest.mark.parametrize("path", core_sources(), ids=lambda p: p.name)
def test_core_source_imports_only_pure_modules(path: Path) -> None:
    banned = {*FORBIDDEN_MODULES, "time", "datetime"}
    imported: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module)
    top_level = {name.split(".")[0] for name in imported if not name.startswith("tether.core")}

    assert top_level & banned == set()
    # The core imports nothing from the layers above it.
    assert {name for name in imported if name.startswith("tether.") and not name.startswith("tether.core")} == set()


@pytest.mark.parametrize(
    "snippet",
    [
        "import time",
        "from time import monotonic",
        "started = time.monotonic()",
        "now = datetime.now()",
        "now = datetime.datetime.utcnow()",
    ],
)
def test_the_clock_pattern_catches_clock_reads(snippet: str) -> None:
    assert CLOCK_READ.search(snippet)


def test_the_clock_pattern_ignores_prose() -> None:
    assert not CLOCK_READ.search("no clock reads; time arrives inside events. Same call made 3 times in a row")
