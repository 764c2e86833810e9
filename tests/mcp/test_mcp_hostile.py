"""A malicious MCP server (tests/mcp/hostile_server.py) must never freeze, exhaust or crash the host.

- Its schemas' regular expressions run only in RE2: a catastrophic pattern
  under any keyword that runs one (input or output schema) is answered at
  once, a pattern RE2 cannot run refuses the server, and one Python's ``re``
  cannot even compile still works.
- What it lists is bounded: tools, pages, name and schema sizes, schema
  depth, references that double the work at each level on one value, or
  that multiply it with each level a value nests past a shallow one, refuse
  the server;
  a long description is cut.
- What it writes is bounded: a line on its stdout (one message) past
  ``MAX_RESPONSE_BYTES``, endless or merely huge, is not read on; the
  request fails naming the bound, and the server is stopped and reaped
  (tests/mcp/endless_stdio_server.py). So is a line holding more than
  ``MAX_RESPONSE_CONTAINERS`` arrays and objects, before the SDK decodes it
  (a child's memory shows it).

A check that froze the host before the fix runs in a child interpreter
(``run_guarded``): Python's ``re`` holds the GIL while it backtracks, so only
a killed child turns a freeze into a failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hostile_server import ESCAPES, EVIL, EVIL_TEXT
from mcp_helpers import HOSTILE, hostile_argv, our_servers, run_guarded, server_argv

from tether.drivers.local.runner import Agent
from tether.mcp import MCPServerError, MCPToolset
from tether.mcp.client import (
    MAX_DESCRIPTION_CHARS,
    MAX_RESPONSE_BYTES,
    MAX_RESPONSE_CONTAINERS,
    MAX_SCHEMA_CHARS,
    MAX_SCHEMA_DEPTH,
    MAX_TOOL_NAME_CHARS,
    MAX_TOOL_PAGES,
    MAX_TOOLS,
)
from tether.models.scripted import ScriptedModel, reply_calls, reply_text
from tether.tools.refs import MAX_IN_PLACE_VISITS, MAX_NESTED_VISITS

QUIET = open(os.devnull, "w")  # noqa: SIM115  (the hostile server's own complaints)

# Makes a toolset of the server, runs one scripted reply holding ``calls``, prints each call's result by id.
AGENT_RUN = """
import asyncio, json, os, sys
from tether.core.budget import Budget
from tether.drivers.local.runner import Agent
from tether.mcp import MCPToolset
from tether.models.scripted import ScriptedModel, reply_calls, reply_text

argv, calls, log = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]

async def main():
    toolset = await asyncio.to_thread(
        MCPToolset.stdio, argv, env={"MCP_TEST_LOG": log}, read_only=True, errlog=open(os.devnull, "w")
    )
    try:
        model = ScriptedModel([reply_calls(*[(i, t, json.dumps(a)) for i, t, a in calls]), reply_text("done")])
        result = await Agent(model, toolset, budget=Budget(max_repairs=len(calls))).run("go")
    finally:
        await toolset.aclose()
    print(json.dumps({c.id: json.loads(c.result) for step in result.steps for c in step.calls}))

asyncio.run(main())
"""


def run_calls(mode: str, calls: list[tuple[str, str, Any]], log: Path) -> dict[str, Any]:
    """Each call's result, from a run against the hostile server in a child that fails the test if it freezes."""
    printed = run_guarded(AGENT_RUN, json.dumps(hostile_argv(mode)), json.dumps(calls), str(log))
    results: dict[str, Any] = json.loads(printed.splitlines()[-1])
    return results


def seen(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_a_catastrophic_pattern_is_answered_at_once_under_every_keyword_that_runs_one(tmp_path: Path) -> None:
    """``^(a+)+$`` against forty ``a`` and a ``!``: hours in Python's re, one pass in RE2. Refused each time."""
    log = tmp_path / "calls.jsonl"
    evil = [
        ("e1", "pattern", {"word": EVIL_TEXT}),
        ("e2", "pattern_properties", {EVIL_TEXT: 1}),
        ("e3", "pattern_additional", {EVIL_TEXT: "x"}),
        ("e4", "pattern_unevaluated", {EVIL_TEXT: "x"}),
        ("e5", "pattern_in_defs", {"word": EVIL_TEXT}),
    ]
    fine = [
        ("f1", "pattern", {"word": "aaa"}),
        ("f2", "pattern_properties", {"aaa": 1}),
        ("f3", "pattern_additional", {"known": "k", "aaa": "x"}),
        ("f4", "pattern_unevaluated", {"known": "k", "aaa": "x"}),
        ("f5", "pattern_in_defs", {"word": "aaa"}),
    ]
    results = run_calls("redos", evil + fine, log)
    for call_id, _, _ in evil:
        assert results[call_id]["error"]["code"] == "invalid_arguments", call_id
    assert results["e1"]["error"]["message"] == f"word: must match {EVIL}"
    assert results["e2"]["error"]["message"] == f"arguments: unexpected field(s) {EVIL_TEXT!r}"
    assert [results[call_id] for call_id, _, _ in fine] == [{"ok": True, "result": "ok"}] * len(fine)
    assert sorted((c["tool"], c["arguments"]) for c in seen(log)) == sorted((t, a) for _, t, a in fine)


def test_a_catastrophic_pattern_in_an_output_schema_never_reaches_pythons_re(tmp_path: Path) -> None:
    """The SDK checks a result against the tool's outputSchema with Python's re; tether checks it with RE2."""
    results = run_calls("redos-output", [("c1", "echo", {})], tmp_path / "calls.jsonl")
    error = results["c1"]["error"]
    assert error["code"] == "tool_failed"
    assert error["message"] == (
        f"MCP server python hostile_server.py: tool echo returned structured content its outputSchema refuses: "
        f"word: must match {EVIL}"
    )


@pytest.mark.parametrize(
    ("mode", "field", "pattern", "why"),
    [
        ("backreference", "inputSchema", r"^(a)\1$", r"invalid escape sequence: \1"),
        ("lookahead", "inputSchema", "^(?=a)", "invalid perl operator: (?="),
        ("output-backreference", "outputSchema", r"^(a)\1$", r"invalid escape sequence: \1"),
    ],
)
def test_a_pattern_re2_cannot_run_refuses_the_server_naming_the_tool(
    mode: str, field: str, pattern: str, why: str
) -> None:
    before = our_servers(HOSTILE)
    with pytest.raises(MCPServerError) as refused:
        MCPToolset.stdio(hostile_argv(mode), errlog=QUIET)
    its = "its outputSchema: " if field == "outputSchema" else ""
    assert str(refused.value) == (
        f"MCP server python hostile_server.py: tool sneaky: {its}the pattern {pattern!r} at #/properties/word/pattern "
        f"cannot run in RE2 ({why}); tether runs an MCP server's patterns only in RE2, whose time is linear "
        "(no backreferences, no lookaround)"
    )
    assert our_servers(HOSTILE) == before


async def test_a_pattern_pythons_re_cannot_even_compile_runs_in_re2(tmp_path: Path) -> None:
    """Groups nested 1200 deep: Python's re raises RecursionError compiling it, RE2 runs it."""
    log = tmp_path / "calls.jsonl"
    toolset = await asyncio.to_thread(
        MCPToolset.stdio, hostile_argv("deep-pattern"), env={"MCP_TEST_LOG": str(log)}, read_only=True, errlog=QUIET
    )
    try:
        calls = reply_calls(("c1", "sneaky", '{"word": "xyz"}'), ("c2", "sneaky", '{"word": "a"}'))
        model = ScriptedModel([calls, reply_text("done")])
        result = await Agent(model, toolset).run("go")
    finally:
        await toolset.aclose()
    results = {c.id: json.loads(c.result or "null") for step in result.steps for c in step.calls}
    assert results["c1"]["error"]["message"] == "word: must match " + "(" * 1200 + "a" + ")" * 1200
    assert results["c2"] == {"ok": True, "result": "ok"}
    assert seen(log) == [{"tool": "sneaky", "arguments": {"word": "a"}}]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (hostile_argv("many-tools", str(MAX_TOOLS + 1)), f"lists more than {MAX_TOOLS} tools, the most tether takes"),
        (hostile_argv("endless-pages"), f"lists more than {MAX_TOOL_PAGES} pages of tools"),
        (hostile_argv("long-name"), f"100000 characters long; a tool name has at most {MAX_TOOL_NAME_CHARS}"),
        (hostile_argv("huge-schema"), rf"its inputSchema is \d+ characters of JSON; at most {MAX_SCHEMA_CHARS} are"),
        (hostile_argv("huge-output-schema"), r"tool huge: its outputSchema is \d+ characters of JSON"),
        (hostile_argv("deep-schema"), f"tool deep: its inputSchema nests more than {MAX_SCHEMA_DEPTH} levels deep"),
        (hostile_argv("doubling"), f"tool doubling: checking one value would visit more than {MAX_IN_PLACE_VISITS}"),
        (
            hostile_argv("doubling-output"),
            f"tool doubling: its outputSchema: checking one value would visit more than {MAX_IN_PLACE_VISITS}",
        ),
        (
            hostile_argv("fanout"),
            f"tool fanout: a value nested 2 levels deep would be checked against more than {MAX_NESTED_VISITS}",
        ),
        (
            hostile_argv("fanout-output"),
            f"tool fanout: its outputSchema: a value nested 2 levels deep would be checked against more than "
            f"{MAX_NESTED_VISITS}",
        ),
    ],
    ids=[
        "many-tools",
        "endless-pages",
        "long-name",
        "huge-schema",
        "huge-output-schema",
        "deep-schema",
        "doubling",
        "doubling-output",
        "fanout",
        "fanout-output",
    ],
)
def test_a_tool_list_past_a_bound_refuses_the_server_and_reaps_it(argv: list[str], message: str) -> None:
    before = our_servers(HOSTILE)
    with pytest.raises(MCPServerError, match=message):
        MCPToolset.stdio(argv, errlog=QUIET)
    assert our_servers(HOSTILE) == before


def test_as_many_tools_as_the_bound_are_taken() -> None:
    with MCPToolset.stdio(hostile_argv("many-tools", str(MAX_TOOLS)), errlog=QUIET) as toolset:
        assert len(toolset) == MAX_TOOLS


def test_a_long_description_is_cut_with_the_marker(caplog: pytest.LogCaptureFixture) -> None:
    with MCPToolset.stdio(hostile_argv("long-description"), errlog=QUIET) as toolset:
        description = toolset[0].description
    said = "Say it again. " * 100_000
    assert description == (
        f"{said[:MAX_DESCRIPTION_CHARS]}…[truncated: showing {MAX_DESCRIPTION_CHARS} of {len(said)} characters]"
    )
    assert f"the description of tool chatty ({len(said)} characters) is cut to {MAX_DESCRIPTION_CHARS}" in caplog.text


@pytest.mark.parametrize(
    ("mode", "options", "message"),
    [
        ("loud-refusal", {}, r"^MCP server python hostile_server\.py: 'EEEE+'…$"),
        (
            "escape-names",
            {"read_only": {"nope"}},
            rf"does not list: nope; it lists: {re.escape(repr(ESCAPES))}, '000n+'…, .* and 480 more$",
        ),
    ],
    ids=["loud-refusal", "escape-names"],
)
def test_what_a_server_says_reaches_an_error_cut_and_with_its_escapes_shown(
    mode: str, options: dict[str, Any], message: str
) -> None:
    """An error the host raises quotes the server's words (its error's message, its tools' names) at most a few
    hundred characters of them, with control characters escaped: the CLI prints it, and a terminal would obey an
    escape sequence in it (retitle itself, colour what follows)."""
    with pytest.raises(MCPServerError) as refused:
        MCPToolset.stdio(hostile_argv(mode), errlog=QUIET, **options)
    said = str(refused.value)
    assert "\x1b" not in said and "\x07" not in said
    assert len(said) < 2000
    assert re.search(message, said), said


ENDLESS_STDIO = Path(__file__).with_name("endless_stdio_server.py")


def results_of(result: Any) -> dict[str, Any]:
    return {c.id: json.loads(c.result or "null") for step in result.steps for c in step.calls}


@pytest.mark.parametrize("mode", ["initialize", "list", "call", "huge-call"])
async def test_a_line_past_the_bound_is_not_read_on_and_stops_the_server(
    mode: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The answer to initialize, tools/list or a call is one line the server writes on and on (512 MiB, or 64 MiB
    that end): the host reads at most the bound, the request fails at once naming it, the server is stopped and
    reaped without ``close()``, nothing logs a traceback, and the next server works."""
    sent = tmp_path / "sent"
    argv = [sys.executable, str(ENDLESS_STDIO), mode, str(sent)]
    too_large = (
        f"MCP server python endless_stdio_server.py: the server's message is larger than {MAX_RESPONSE_BYTES} bytes; "
        "not read"
    )
    options: dict[str, Any] = {"read_only": True, "errlog": QUIET, "connect_timeout": 20, "timeout": 20}
    started = time.monotonic()
    if mode in ("initialize", "list"):
        with pytest.raises(MCPServerError) as refused:
            await asyncio.to_thread(MCPToolset.stdio, argv, **options)
        assert str(refused.value) == too_large
        assert time.monotonic() - started < 10
    else:
        toolset = await asyncio.to_thread(MCPToolset.stdio, argv, **options)
        try:
            calls = [reply_calls(("c1", "echo", "{}")), reply_calls(("c2", "echo", "{}")), reply_text("done")]
            model = ScriptedModel(calls)
            results = results_of(await Agent(model, toolset).run("go"))
            assert time.monotonic() - started < 10
            assert results["c1"]["error"]["message"] == too_large
            assert results["c2"]["error"]["message"] == (
                f"MCP server python endless_stdio_server.py is not connected ({too_large.partition(': ')[2]})"
            )
            deadline = time.monotonic() + 10
            while our_servers(ENDLESS_STDIO) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
        finally:
            await toolset.aclose()
    assert our_servers(ENDLESS_STDIO) == []
    assert int(sent.read_text()) < 2 * MAX_RESPONSE_BYTES  # what the server wrote before the host stopped reading
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    async with await asyncio.to_thread(MCPToolset.stdio, server_argv("stdio"), errlog=QUIET, read_only=True) as fine:
        model = ScriptedModel([reply_calls(("c1", "add", '{"a": 2, "b": 3}')), reply_text("done")])
        assert results_of(await Agent(model, fine).run("go"))["c1"] == {"ok": True, "result": 5}


# Makes a toolset of the server ``argv``, calls its tool twice in one run, prints each call's result by id and how
# far the child's peak memory (its maximum resident set) grew over the run, in MB, and the server processes left.
MEASURED_RUN = """
import asyncio, json, os, resource, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from mcp_helpers import our_servers
from tether.drivers.local.runner import Agent
from tether.mcp import MCPToolset
from tether.models.scripted import ScriptedModel, reply_calls, reply_text

argv = json.loads(sys.argv[1])

async def main():
    toolset = await asyncio.to_thread(MCPToolset.stdio, argv, read_only=True, errlog=open(os.devnull, "w"))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        replies = [reply_calls(("c1", "echo", "{}")), reply_calls(("c2", "echo", "{}")), reply_text("done")]
        result = await Agent(ScriptedModel(replies), toolset).run("go")
    finally:
        await toolset.aclose()
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    results = {c.id: json.loads(c.result) for step in result.steps for c in step.calls}
    print(json.dumps({"results": results, "grown": grown, "left": our_servers(Path(argv[1]))}))

asyncio.run(main())
"""


def test_a_line_of_too_many_arrays_and_objects_is_refused_before_it_is_decoded(tmp_path: Path) -> None:
    """500,000 empty text blocks, 15 MB: under the byte bound, but the SDK made 900 MB of objects of them. The call
    fails naming the bound, the host's memory grows by far less than one block decoded costs (2 KB) times the
    bound, the server is stopped and reaped, and the host runs on (the child ends its run)."""
    argv = [sys.executable, str(ENDLESS_STDIO), "blocks", str(tmp_path / "sent"), "500000"]
    printed = run_guarded(MEASURED_RUN, json.dumps(argv), str(Path(__file__).parent))
    measured = json.loads(printed.splitlines()[-1])
    past = f"the server's message holds more than {MAX_RESPONSE_CONTAINERS} JSON arrays and objects; not read"
    assert measured["results"]["c1"]["error"]["message"] == f"MCP server python endless_stdio_server.py: {past}"
    assert measured["results"]["c2"]["error"]["message"] == (
        f"MCP server python endless_stdio_server.py is not connected ({past})"
    )
    assert measured["left"] == []
    assert measured["grown"] < 100, measured["grown"]  # the 15 MB line and its text; decoded, 900 MB


@pytest.mark.parametrize(
    ("mode", "count", "refused"),
    [
        ("blocks", MAX_RESPONSE_CONTAINERS - 3, False),  # with the message, its result and its content: the bound
        ("blocks", MAX_RESPONSE_CONTAINERS - 2, True),
        ("records", 10_000, False),  # 20,000 in structured content; as many again as brackets in its text
        ("brackets", 4 * MAX_RESPONSE_CONTAINERS, False),  # all in the text: none is an array or an object
    ],
)
async def test_the_arrays_and_objects_of_a_line_are_counted_exactly(
    mode: str, count: int, refused: bool, tmp_path: Path
) -> None:
    """Only arrays and objects count, not brackets in strings: up to the bound a result is the call's, one more
    and it is refused."""
    argv = [sys.executable, str(ENDLESS_STDIO), mode, str(tmp_path / "sent"), str(count)]
    options: dict[str, Any] = {"errlog": QUIET, "read_only": True, "max_result_chars": 10**7}  # the whole result
    async with await asyncio.to_thread(MCPToolset.stdio, argv, **options) as toolset:
        model = ScriptedModel([reply_calls(("c1", "echo", "{}")), reply_text("done")])
        result = results_of(await Agent(model, toolset).run("go"))["c1"]
    if refused:
        assert f"holds more than {MAX_RESPONSE_CONTAINERS} JSON arrays and objects" in result["error"]["message"]
    elif mode == "records":
        assert result["ok"] and len(result["result"]["records"]) == count
        assert result["result"]["records"][-1] == {"id": count - 1, "name": f"item {count - 1}", "tags": ["new"]}
    else:
        assert result["ok"], result
        assert result["result"] == ("\n" * (count - 1) if mode == "blocks" else "[{" * count)
