"""Each provider profile asks for structured output its own way, over real HTTP against FakeServer (issue 10.1)."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest

from tether import Agent, Status
from tether.cli.common import model_of
from tether.core.errors import ConfigurationError
from tether.models.providers import PROVIDERS
from tether.testing import FakeServer, ReplySpec, text, tool_calls
from tether.tools.output import OutputMode

ANSWER = {"customer": "ACME", "total": 3720}


class Invoice(pydantic.BaseModel):
    customer: str
    total: int


def answer(request: dict[str, Any]) -> ReplySpec:
    """The answer in whichever form the request asked for it."""
    names = [t.get("name") or t.get("function", {}).get("name") for t in request.get("tools", ())]
    if "final_answer" in names:
        return tool_calls([("c1", "final_answer", json.dumps(ANSWER))])
    return text(json.dumps(ANSWER))


def offered(request: dict[str, Any]) -> list[str]:
    return [t.get("name") or t["function"]["name"] for t in request.get("tools", ())]


EXPECTED: dict[str, OutputMode] = {
    "openai": "native",
    "snowflake": "native",
    "llama-cpp-python": "tool",
    "anthropic": "tool",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_a_structured_run_through_each_profile_is_asked_the_profiles_way(name: str) -> None:
    with FakeServer(answer) as server:
        base_url = server.origin if PROVIDERS[name].protocol == "anthropic" else server.base_url
        model = model_of({"provider": name, "model": "fake", "base_url": base_url}, "sk-test")
        async with Agent(model, [], output_type=Invoice) as agent:
            result = await agent.run("Invoice ACME.")
    assert result.status is Status.COMPLETED, result
    assert result.output == Invoice(**ANSWER)
    sent = server.requests[0]
    if EXPECTED[name] == "native":
        assert sent["response_format"]["type"] == "json_schema"
        assert "final_answer" not in offered(sent)
    else:
        assert "response_format" not in sent
        assert "final_answer" in offered(sent)


def test_every_profile_names_an_output_mode() -> None:
    assert {name: p.output_mode for name, p in PROVIDERS.items()} == {**EXPECTED, "local": "tool"}


async def test_the_agents_output_mode_overrides_the_profiles() -> None:
    with FakeServer(answer) as server:
        model = model_of({"provider": "openai", "model": "fake", "base_url": server.base_url}, "sk-test")
        assert model.output_mode == "native"
        async with Agent(model, [], output_type=Invoice, output_mode="tool") as agent:
            result = await agent.run("Invoice ACME.")
    assert result.output == Invoice(**ANSWER)
    assert "response_format" not in server.requests[0]
    assert "final_answer" in offered(server.requests[0])


def test_a_model_without_response_format_refuses_the_native_mode() -> None:
    from tether.models.anthropic import AnthropicModel
    from tether.models.openai_chat import OpenAIChatModel

    with pytest.raises(ConfigurationError, match="response_format"):
        AnthropicModel("fake", base_url="http://127.0.0.1:9", output_mode="native")
    with pytest.raises(ConfigurationError, match="output_mode must be one of"):
        OpenAIChatModel("fake", base_url="http://127.0.0.1:9", output_mode="json")  # type: ignore[arg-type]


def test_an_agent_asking_a_model_for_a_mode_it_cannot_send_is_refused_at_construction() -> None:
    from tether.models.anthropic import AnthropicModel
    from tether.models.openai_chat import OpenAIChatModel

    anthropic = AnthropicModel("fake", base_url="http://127.0.0.1:9")
    with pytest.raises(ConfigurationError, match=r"AnthropicModel .*native.*output_mode='tool' or 'prompted'"):
        Agent(anthropic, [], output_type=Invoice, output_mode="native")
    for mode in ("tool", "prompted"):  # what the message offers is accepted
        assert Agent(anthropic, [], output_type=Invoice, output_mode=mode).output is not None
    openai = OpenAIChatModel("fake", base_url="http://127.0.0.1:9")
    assert Agent(openai, [], output_type=Invoice, output_mode="native").output is not None
    # A profile whose server refuses json_schema (llama-cpp-python): its wire switch takes native away.
    llama = OpenAIChatModel("fake", base_url="http://127.0.0.1:9", compat=PROVIDERS["llama-cpp-python"].wire)
    assert llama.output_mode == "tool"
    with pytest.raises(ConfigurationError, match=r"OpenAIChatModel .*native.*output_mode='tool' or 'prompted'"):
        Agent(llama, [], output_type=Invoice, output_mode="native")
    with pytest.raises(ConfigurationError, match="output_mode='tool' or 'prompted'"):
        OpenAIChatModel("fake", base_url="http://127.0.0.1:9", compat=llama.compat, output_mode="native")
