"""Running the real ``tether`` command in a subprocess, for the CLI tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tether.testing.fake_server import FakeServer


@dataclass(frozen=True)
class Completed:
    code: int
    out: str
    err: str


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without the developer's OPENAI_*, ANTHROPIC_* and TETHER_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "TETHER_"))}
    env["PYTHONUTF8"] = "1"
    env.update(extra)
    return env


def tether(
    *argv: str, env: Mapping[str, str] | None = None, input: str | None = None, cwd: Path | None = None
) -> Completed:
    """Run ``tether ARGV`` (``input`` on its standard input); no output may ever hold a Python traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "tether", *argv],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=dict(env) if env is not None else clean_env(),
        timeout=90,
        input=input,
        cwd=cwd,
    )
    result = Completed(done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in result.out + result.err, result
    return result


def endpoint(server: FakeServer, key: str = "x") -> list[str]:
    return ["--base-url", server.base_url, "--model", "fake", "--api-key", key]
