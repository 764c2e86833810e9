"""``tether serve TARGET``: a target naming no Agent is a configuration error (exit 3) saying why, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from serve_harness import AGENT_PY

from tether.core.errors import ConfigurationError
from tether.drivers.local.runner import Agent
from tether.serve.target import load_agent

MODEL_ENV = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "sk-test"}


def serve(*argv: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TETHER_"))}
    env.update(MODEL_ENV, TETHER_DB=str(cwd / "runs.db"), **extra)
    done = subprocess.run(
        [sys.executable, "-m", "tether", "serve", *argv], capture_output=True, text=True, env=env, cwd=cwd, timeout=90
    )
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "agent.py").write_text(AGENT_PY + "\n\ndef make():\n    return agent\n\nnumber = 42\n")
    (tmp_path / "broken.py").write_text("def oops(:\n")
    (tmp_path / "raises.py").write_text("raise RuntimeError('boom')\n")
    (tmp_path / "needs.py").write_text("import no_such_dependency_xyz\n")
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(0)\n")
    return tmp_path


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("agent.py", "is not MODULE:ATTRIBUTE or FILE.py:ATTRIBUTE"),
        (":agent", "is not MODULE:ATTRIBUTE or FILE.py:ATTRIBUTE"),
        ("missing.py:agent", "no file missing.py"),
        ("no_such_module_xyz:agent", "no module no_such_module_xyz"),
        ("agent.py:nobody", "agent.py has no attribute 'nobody'"),
        ("agent.py:number", "agent.py:number is a int, not an Agent"),
        ("agent.py:os", "agent.py:os is a module, not an Agent"),
        ("broken.py:agent", "broken.py has a syntax error"),
        ("raises.py:agent", "importing raises.py failed: RuntimeError: boom"),
        ("needs:agent", "importing needs failed: ModuleNotFoundError"),
        ("sys:exit", "sys:exit() failed: SystemExit"),  # exit 0 would tell a supervisor all went well
        ("exits.py:agent", "importing exits.py failed: SystemExit"),
    ],
)
def test_a_target_that_names_no_agent_is_a_configuration_error(folder: Path, target: str, said: str) -> None:
    done = serve(target, cwd=folder)
    assert done.returncode == ConfigurationError.exit_code, done.stderr
    assert said in done.stderr


def test_an_agent_or_a_function_returning_one_is_loaded(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in MODEL_ENV.items():
        monkeypatch.setenv(name, value)
    assert isinstance(load_agent(f"{folder / 'agent.py'}:agent"), Agent)
    assert isinstance(load_agent(f"{folder / 'agent.py'}:make"), Agent)


def test_options_that_do_not_fit_are_refused_before_anything_listens(folder: Path) -> None:
    seeded = serve("agent.py:agent", "--seed", cwd=folder)  # the ticket example's option, not tether's
    assert seeded.returncode == 2 and "No such option '--seed'" in seeded.stderr
    workers = serve("agent.py:agent", "--workers", "2", cwd=folder)
    assert workers.returncode == ConfigurationError.exit_code and "needs a run store" in workers.stderr
    public = serve("agent.py:agent", "--host", "0.0.0.0", "--auth", "none", cwd=folder)
    assert public.returncode == ConfigurationError.exit_code and "only on a loopback address" in public.stderr
    lease = serve("agent.py:agent", cwd=folder, TETHER_LEASE_SECONDS="soon")
    assert lease.returncode == ConfigurationError.exit_code and "TETHER_LEASE_SECONDS must be" in lease.stderr


@pytest.mark.parametrize("argv", [[], ["--auth", "none"], ["--workers", "2"]])
def test_without_a_target_it_says_to_name_an_agent_and_where_the_ticket_demo_is(folder: Path, argv: list[str]) -> None:
    done = serve(*argv, cwd=folder)
    assert done.returncode == 2, done.stderr
    assert "name the agent to serve: tether serve PATH_OR_MODULE:AGENT" in done.stderr
    assert "examples/tickets/README.md" in done.stderr
    assert not (folder / "runs.db").exists() and not (folder / "tickets.db").exists()  # nothing written
