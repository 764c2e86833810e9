"""Docs derived from code stay in step with it, and the public surface is explicit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_generated_docs_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "docs" / "generate.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_public_surface() -> None:
    import tether

    for name in tether.__all__:
        assert getattr(tether, name) is not None
    assert "Agent" in tether.__all__ and "tool" in tether.__all__
