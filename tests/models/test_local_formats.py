"""Native tool formats: a GGUF whose chat template knows tools is driven in its own format.

The templates in ``templates/`` are the real ones of Qwen 2.5, Llama 3.2,
Mistral Nemo and Gemma 2 (as llama.cpp keeps them in models/templates).
They are rendered by ``tether.models.local_format`` and, to check the whole
path (prompt, grammar, parsing), driven with the embedded SmolLM2 model:
the model is not trained on these formats, but under the family's grammar
its forced call must still come back as a well-formed call.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tether.core import Message
from tether.core.messages import ToolCall
from tether.models import ModelRequest
from tether.models.local import LocalModel
from tether.models.local_format import Renderer, family_of
from tether.toolsets import load_toolset

TEMPLATES = Path(__file__).parent / "templates"
FAMILIES = {
    "Qwen-Qwen2.5-7B-Instruct.jinja": "hermes",
    "meta-llama-Llama-3.2-3B-Instruct.jinja": "llama3",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": "mistral",
    "google-gemma-2-2b-it.jinja": "tether",
}
CALC = [t.spec() for t in load_toolset("calc")]


def conversation(call_id: str) -> list[Message]:
    call = ToolCall(call_id, "multiply", '{"a": 248, "b": 15}')
    return [
        Message("system", "Be brief."),
        Message("user", "What is 248 times 15?"),
        Message("assistant", None, (call,)),
        Message("tool", '{"ok": true, "result": 3720}', tool_call_id=call_id),
    ]


@pytest.mark.parametrize(("name", "family"), FAMILIES.items())
def test_the_family_is_read_from_the_template(name: str, family: str) -> None:
    assert family_of((TEMPLATES / name).read_text()) == family
    assert family_of(None) == "tether"


@pytest.mark.parametrize("name", FAMILIES)
def test_each_template_renders_calls_results_and_descriptions_unescaped(name: str) -> None:
    renderer = Renderer((TEMPLATES / name).read_text(), bos_token="<s>", eos_token="</s>")
    call_id = renderer.format.call_id(1, 0)
    prompt = renderer.render(conversation(call_id), CALC)
    result = '{"ok": true, "result": 3720}'
    # Llama 3's template writes a string result through tojson; that is its format, not an escape.
    # The tether family reports a success by its bare value, restating the call.
    bare = "Result of multiply(a=248, b=15): 3720." if renderer.format.family == "tether" else result
    assert (bare in prompt or json.dumps(result) in prompt) and "248" in prompt
    assert "Multiply two integers" in prompt
    assert "&#34;" not in prompt and "&quot;" not in prompt and "&lt;" not in prompt
    assert renderer.render(conversation(call_id), CALC) == prompt  # the same conversation, the same prompt


def test_mistral_call_ids_have_the_nine_characters_its_template_demands() -> None:
    fmt = Renderer((TEMPLATES / "mistralai-Mistral-Nemo-Instruct-2407.jinja").read_text()).format
    ids = {fmt.call_id(turn, index) for turn in (1, 12) for index in (0, 3)}
    assert len(ids) == 4 and all(len(i) == 9 and i.isalnum() for i in ids)


@pytest.fixture(scope="module")
def models() -> dict[str, LocalModel]:
    return {name: LocalModel(chat_template=(TEMPLATES / name).read_text()) for name in FAMILIES}


@pytest.mark.parametrize("name", FAMILIES)
def test_a_forced_call_comes_back_well_formed_in_each_family(models: dict[str, LocalModel], name: str) -> None:
    model = models[name]
    named = {"type": "function", "function": {"name": "multiply"}}
    request = ModelRequest([Message("user", "What is 248 times 15?")], CALC, tool_choice=named, max_tokens=64)
    reply = asyncio.run(model.complete(request))
    assert reply.finish_reason == "tool_calls" and len(reply.tool_calls) >= 1
    call = reply.tool_calls[0]
    assert call.name == "multiply" and call.id == model.format.call_id(1, 0)
    arguments = json.loads(str(call.arguments))
    assert set(arguments) == {"a", "b"} and all(abs(v) <= 1_000_000 for v in arguments.values())
