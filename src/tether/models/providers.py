"""Per-provider compatibility profiles: every leniency is named, off by default.

A profile switches wire quirks (``WireCompat``) and, rarely, protocol
leniency (``Compat``) for one kind of server. The defaults are strict; a
profile is chosen explicitly with ``--provider`` or ``TETHER_PROVIDER``.
A profile also names its wire protocol: ``openai`` (``OpenAIChatModel``),
``responses`` (``OpenAIResponsesModel``, OpenAI's Responses API; the CLI's
``--protocol responses`` picks it with any ``openai`` profile) or
``anthropic`` (``AnthropicModel``, Anthropic's Messages API), and how a run
with an ``output_type`` asks for its answer (``output_mode``): ``native``
(``response_format`` with a ``json_schema``), ``tool`` (a final-answer tool)
or ``prompted`` (the schema in a system message). ``Agent(output_mode=...)``
overrides it. ``strict_tools`` says whether the server enforces OpenAI's
strict mode on tool schemas: only then are tools sent in that form (every
property required, the optional ones nullable, ``"strict": true``); every
other provider gets each tool's own schema. ``None`` leaves it to the
adapter (``OpenAIChatModel`` and ``OpenAIResponsesModel``: only for ``api.openai.com``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from tether.core.budget import Compat
from tether.core.errors import ConfigurationError
from tether.models.openai_chat import WireCompat

if TYPE_CHECKING:
    from tether.tools.output import OutputMode


@dataclass(frozen=True, slots=True)
class Provider:
    name: str
    protocol: Literal["openai", "responses", "anthropic"] = "openai"
    wire: WireCompat = field(default_factory=WireCompat)
    compat: Compat = field(default_factory=Compat)
    output_mode: OutputMode = "native"
    strict_tools: bool | None = None
    notes: tuple[str, ...] = ()


# Each quirk below was observed against the real server and has a test in
# tests/models/test_llama_server.py.
LLAMA_CPP_PYTHON = Provider(
    "llama-cpp-python",
    strict_tools=False,
    wire=WireCompat(
        null_content_as_empty=True,
        tool_results_as_user=True,
        explicit_tool_choice=True,
        no_stream_with_auto_tools=True,
        max_tokens_means_length=True,
        no_json_schema=True,
    ),
    output_mode="tool",
    notes=(
        'rejects an assistant message whose content is null (HTTP 500, validation error): sends ""',
        'ignores tools unless tool_choice is given: sends tool_choice "auto"',
        "answers a streamed request with tools and automatic choice with an empty stream: "
        "such requests are not streamed",
        "drops role=tool messages from the prompt (chatml-function-calling): results are sent as marked user turns",
        "reports a forced call cut off by max_tokens as finish_reason tool_calls: a reply that used all of max_tokens "
        "is treated as length",
        "ignores max_tokens with automatic tool choice: a run can only be forced into length without tools or with "
        "a named tool choice",
        'answers tool_choice "required" with HTTP 500 and an empty message',
        # Quirks of the chatml-function-calling chat handler itself (the embedded model uses tether's own
        # handler instead, tether.models.local); tested in tests/models/test_local.py.
        "forbids a text answer when tools are offered with automatic choice: the message body is constrained "
        'to "functions.<name>:" or the end of the turn, so content is "" or a half-written call',
        "HTML-escapes the prompt: a tool result reaches the model as &lt;tool_result … &#34;ok&#34;",
        "leaves tool descriptions out of the prompt (names and parameter schemas only, plus a generic "
        'example { "arg1": "value1" } that small models copy)',
        "ignores minimum and maximum in the argument grammar: a bounded integer can be written as 1000000000000000",
        "numbers tool calls from the random completion id, so the same prompt gives a different conversation every run",
        'types response_format as {"type": "text" | "json_object", "schema": ...} only (llama_cpp.llama_types, '
        '0.3.x): OpenAI\'s "json_schema" form is answered with HTTP 500, so structured output uses the final-answer '
        "tool (no_json_schema: the native mode is refused when the Agent is built)",
    ),
)

# The embedded model (tether.models.local): tether's own chat handler has none of the quirks above, and
# small models get a policy instead (Compat.answer_after_success; the handler's call margin).
LOCAL = Provider(
    "local",
    strict_tools=False,
    compat=Compat(answer_after_success=True),
    output_mode="tool",
    notes=(
        "SmolLM2-135M never writes a tool call first by itself (0 of 8 prompts): the handler opens one when the "
        "model scores the call opener within LocalModel.call_margin of its likeliest token",
        "decoding the tool name greedily, it picks the first tool listed (add for 5 of 12 one-step arithmetic "
        "prompts): the handler calls the tool under which the model scores the request likeliest "
        "(LocalModel.score_tools)",
        'it scores the call opener high for some prompts needing no tool ("Reply with the word yes."): a call is '
        "made only when the request is at most LocalModel.tool_margin less likely under its best tool than under "
        "a plain system line",
        "it rarely knows when it is done: after a step whose calls all succeeded, the answer is asked for in text",
        "LocalModel ignores response_format: structured output uses the final-answer tool, whose arguments the "
        "handler's grammar constrains to the schema",
    ),
)

ANTHROPIC = Provider(
    "anthropic",
    protocol="anthropic",
    output_mode="tool",
    strict_tools=False,
    notes=(
        "the Messages API, not chat completions: env ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, ANTHROPIC_MODEL",
        "max_tokens is required by the API: tether sends DEFAULT_MAX_TOKENS (4096) unless the run sets it",
        "the Messages API has no response_format: structured output uses the final-answer tool",
        "OpenAI's strict mode is not the Messages API's: tools are sent with their own schemas "
        "(tests/models/test_recorded_anthropic.py)",
    ),
)

# Seen in the recorded replies of Snowflake Cortex's OpenAI-compatible endpoint
# (../shared/fixtures/recorded/openai_chat.jsonl, test_snowflake_*); the raw
# behaviour is shown in tests/models/test_recorded.py.
SNOWFLAKE = Provider(
    "snowflake",
    compat=Compat(accept_empty_finish_reason_with_calls=True),
    strict_tools=False,
    notes=('answers every reply with finish_reason "", also one that carries valid tool calls',),
)

PROVIDERS: dict[str, Provider] = {
    "openai": Provider(
        "openai", strict_tools=True, notes=('enforces strict mode on tool schemas: tools are sent with "strict": true',)
    ),
    LLAMA_CPP_PYTHON.name: LLAMA_CPP_PYTHON,
    ANTHROPIC.name: ANTHROPIC,
    SNOWFLAKE.name: SNOWFLAKE,
    LOCAL.name: LOCAL,
}


def provider(name: str) -> Provider:
    try:
        return PROVIDERS[name]
    except KeyError:
        raise ConfigurationError(f"unknown provider {name!r}; known: {', '.join(PROVIDERS)}") from None
