"""How a conversation becomes a prompt for a local model, and how a tool call comes back.

A GGUF file carries its chat template (``tokenizer.chat_template``). When
that template knows a tool-calling format, the model is driven in it,
rendered by the template itself (native tool calling):

========  =====================================  =================================================
family    recognised by (in the template)        a call, as the model writes it
========  =====================================  =================================================
hermes    ``<tool_call>`` (Qwen 2.5, Hermes)     ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``
llama3    ``<|start_header_id|>`` and ``tools``   ``{"name": …, "parameters": {…}}``
mistral   ``[TOOL_CALLS]``                       ``[TOOL_CALLS][{"name": …, "arguments": {…}}]``
tether    anything else (SmolLM2, Gemma 3)       ``functions.<name>:`` newline ``{…}``
========  =====================================  =================================================

The ``tether`` family is tether's own handler for templates without tools:
the tools (names, descriptions, parameters) and the turns to expect go
into the system prompt, a call is written ``functions.<name>:`` and its
arguments, and a result comes back as a user turn that restates the call
and asks for an answer ending with the result (``Result of
subtract(a=900, b=358): 542.``). The model's own template still frames the
turns (ChatML when the file has none).

Templates are rendered here with Jinja2's sandbox and no HTML escaping:
what the model reads is exactly the text of the conversation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tether.core import nesting
from tether.core.messages import Message, ToolCall

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

TETHER_PREFIX = "functions."
SMALL_MODEL_SYSTEM = """You are a helpful assistant.

You have access to the following functions:

{tools}

To respond with a function call begin the message with 'functions.<function_name>:', use the following format:

functions.<function_name>:
{{ "arg1": "value1", "arg2": "value2" }}

Call a function only when the request needs one; otherwise answer in plain text."""
RESULT_FOOTER = "\nAnswer my question in one sentence that ends with this result."
# In a step that must answer in text, no token may begin a call (the model tends to echo its last one).
CALL_WORDS = ("functions", "Functions")


@dataclass(frozen=True, slots=True)
class ToolFormat:
    """One family's way of writing tool calls."""

    family: str
    call_open: str  # what the reply starts with when the model calls a tool
    call_close: str
    arguments_key: str = "arguments"
    native: bool = True  # rendered by the model's own template, tools included
    max_calls: int = 4  # calls in one reply; the grammar allows no more

    def parse(self, text: str) -> list[tuple[str, Any]]:
        """``(name, arguments)`` of each call in ``text`` (written under this family's grammar)."""
        body = text.strip()
        if self.family == "tether":
            name, _, arguments = body.removeprefix(TETHER_PREFIX).partition(":")
            return [(name, nesting.loads(arguments, nesting.MAX_REPLY_DEPTH))]
        if self.family == "mistral":
            items = nesting.loads(body.removeprefix(self.call_open).strip(), nesting.MAX_REPLY_DEPTH)
            return [(item["name"], item[self.arguments_key]) for item in items]
        calls = []
        for chunk in body.split(self.call_open)[1:] if self.call_open else [body]:
            item = nesting.loads(chunk.split(self.call_close)[0] if self.call_close else chunk, nesting.MAX_REPLY_DEPTH)
            calls.append((item["name"], item[self.arguments_key]))
        return calls

    def grammar_root(self, call_rule: str, max_calls: int | None = None) -> str:
        """The GBNF root of a reply made of calls (``call_rule`` is one call's JSON)."""
        extra = (max_calls or self.max_calls) - 1
        if self.family == "mistral":
            more = f' ("," " "? {call_rule})?' * extra
            return f'root ::= "[TOOL_CALLS]" " "? "[" {call_rule}{more} "]"'
        one = f"{json.dumps(self.call_open)} {call_rule} {json.dumps(self.call_close)}"
        more = f' ("\\n" {one})?' * extra
        return f"root ::= {one}{more}"

    def call_id(self, turn: int, index: int) -> str:
        """A short id, the same for the same conversation (Mistral's templates insist on 9 characters)."""
        return f"c{turn:04d}n{index:03d}" if self.family == "mistral" else f"call_{turn}_{index}"


FORMATS = {
    "hermes": ToolFormat("hermes", "<tool_call>\n", "\n</tool_call>"),
    "llama3": ToolFormat("llama3", "", "", arguments_key="parameters", max_calls=1),
    "mistral": ToolFormat("mistral", "[TOOL_CALLS]", ""),
    "tether": ToolFormat("tether", TETHER_PREFIX, "", native=False, max_calls=1),
}


def family_of(template: str | None) -> str:
    """Which tool format a chat template speaks (``tether`` when it speaks none)."""
    if not template:
        return "tether"
    if "<tool_call>" in template:
        return "hermes"
    if "<|start_header_id|>" in template and "tools" in template:
        return "llama3"
    if "[TOOL_CALLS]" in template:
        return "mistral"
    return "tether"


def _listing(spec: dict[str, Any]) -> str:
    """One tool as the ``tether`` family lists it: the name as a call begins, its description, its parameters."""
    function = spec["function"]
    description = " ".join((function.get("description") or "").split())
    parameters = json.dumps(function.get("parameters") or {}, sort_keys=True)
    return f"{TETHER_PREFIX}{function['name']}:\n{description}\n{parameters}\n"


def tether_system(tools: Sequence[dict[str, Any]]) -> str:
    """The system prompt of the ``tether`` family: every tool with its description, and the turns to expect.

    The layout is that of llama-cpp-python's ``chatml-function-calling``
    (with which SmolLM2-135M picked the right tool for 4 of 5 arithmetic
    prompts, against 1 of 6 with Hermes' ``<tool_call>`` JSON), plus each
    tool's description and the result turn.
    """
    return SMALL_MODEL_SYSTEM.format(tools="\n".join(_listing(t) for t in tools))


def tether_messages(messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """The conversation as plain text turns: calls written out, results as marked user turns."""
    made = {c.id: c for m in messages for c in m.tool_calls}
    out: list[dict[str, str]] = []
    if tools:
        system = tether_system(tools)
        if messages and messages[0].role == "system":
            system = f"{messages[0].content or ''}\n\n{system}"
            messages = messages[1:]
        out.append({"role": "system", "content": system})
    for m in messages:
        if m.role == "tool":
            text = _result_line(made.get(m.tool_call_id or ""), m.content or "")
            if out and out[-1]["role"] == "user" and out[-1]["content"].endswith(RESULT_FOOTER):
                head = out[-1]["content"].removesuffix(RESULT_FOOTER)
                out[-1]["content"] = f"{head}\n{text}{RESULT_FOOTER}"
            else:
                out.append({"role": "user", "content": text + RESULT_FOOTER})
        elif m.tool_calls:
            calls = "\n".join(f"{TETHER_PREFIX}{c.name}:\n{c.arguments}" for c in m.tool_calls)
            out.append({"role": "assistant", "content": ((m.content or "") + "\n" + calls).strip()})
        else:
            out.append({"role": m.role, "content": m.content or ""})
    return out


def _result_line(call: ToolCall | None, content: str) -> str:
    """A result as the ``tether`` family reports it: the bare value of a success, the whole envelope otherwise.

    SmolLM2 echoed ``{"ok": true, "result": 30}`` back as its answer; ``add returned 30.`` it puts in a
    sentence. A success restates the call with its arguments (``Result of subtract(a=900, b=358): 542.``):
    with the name alone it garbled the operands into its answer ("The result of subtracting 542 from 900
    is 100."); ``subtract(a=900, b=358) returned 542.`` did better, but not as well (docs/benchmarks.md).
    """
    name = call.name if call else "tool"
    try:
        envelope = nesting.loads(content, nesting.MAX_REPLY_DEPTH)
    except ValueError:
        envelope = None
    if isinstance(envelope, dict) and envelope.get("ok") is True and "result" in envelope:
        value = envelope["result"]
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return f"Result of {_call_text(call) if call else name}: {shown}."
    return f"{name} returned: {content}"


def _call_text(call: ToolCall) -> str:
    """A call as a result line restates it: ``subtract(a=900, b=358)`` (the name alone when the arguments are
    not a JSON object)."""
    try:
        arguments = nesting.loads(call.arguments, nesting.MAX_DEPTH)
    except ValueError:
        return call.name
    if not isinstance(arguments, dict):
        return call.name
    listed = ", ".join(f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in arguments.items())
    return f"{call.name}({listed})"


def native_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The conversation in the OpenAI shape chat templates with tools expect (arguments as objects)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        item: dict[str, Any] = {"role": m.role, "content": m.content or ""}
        if m.role == "tool":
            item["tool_call_id"] = m.tool_call_id
            item["name"] = next((c.name for x in messages for c in x.tool_calls if c.id == m.tool_call_id), "")
        if m.tool_calls:
            item["tool_calls"] = []
            for c in m.tool_calls:
                try:
                    arguments: Any = nesting.loads(c.arguments, nesting.MAX_DEPTH)
                except ValueError:  # too deep too: the gate refused it, the template must still render
                    arguments = {}
                item["tool_calls"].append(
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": arguments}}
                )
        out.append(item)
    return out


class Renderer:
    """Renders a conversation with one model's chat template (no HTML escaping)."""

    def __init__(self, template: str | None, bos_token: str = "", eos_token: str = "") -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(autoescape=False, trim_blocks=True, lstrip_blocks=True)
        # Jinja's own tojson returns Markup, and Markup escapes any plain string added to it
        # ('"' + key + '": ' + val|tojson gives &#34;key&#34;): a plain string, as transformers renders it.
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: "26 Jul 2024"  # fixed: the same prompt every run
        self.template = template or CHATML
        self._template = env.from_string(self.template)
        self.bos_token, self.eos_token = bos_token, eos_token
        self.format = FORMATS[family_of(template)]

    def render(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> str:
        if self.format.native:
            return self._render(native_messages(messages), list(tools) or None)
        turns = tether_messages(messages, tools)
        try:
            return self._render(turns, None)
        except Exception:  # templates like Gemma's refuse a system turn: fold it into the first user turn
            if not (turns and turns[0]["role"] == "system" and len(turns) > 1):
                raise
            merged = [{"role": turns[1]["role"], "content": turns[0]["content"] + "\n\n" + turns[1]["content"]}]
            return self._render(merged + turns[2:], None)

    def frame(self, system: str, user: str) -> tuple[str, str]:
        """A conversation of ``system`` and one ``user`` turn, split where the user's text begins: (before, text)."""
        marker = "\x00"
        turns = [{"role": "system", "content": system}, {"role": "user", "content": marker}]
        try:
            rendered = self._render(turns, None)
        except Exception:  # no system turn in this template (Gemma): the line opens the user turn
            rendered = self._render([{"role": "user", "content": f"{system}\n\n{marker}"}], None)
        return rendered[: rendered.index(marker)], user

    def _render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        return str(
            self._template.render(
                messages=messages,
                tools=tools,
                add_generation_prompt=True,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        )


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str) -> None:
    raise ValueError(message)
