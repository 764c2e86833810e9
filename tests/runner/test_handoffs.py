"""Handoffs over real HTTP against FakeServer: what each request carries after a transfer, and every gate across it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tether import Agent, Budget, ModelSettings, OpenAIChatModel, Principal, SQLiteStore, Status, tool
from tether.core.errors import ConfigurationError
from tether.drivers.local.handoffs import handoff
from tether.drivers.local.stream import HandedOff, RunFinished, StepFinished, StepStarted, TextDelta
from tether.testing import FakeServer
from tether.testing.fake_server import text, tool_calls


@tool(read_only=True, inline=True)
def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order}: paid twice"


@tool(read_only=True, inline=True, untrusted_output=True)
def search(query: str) -> str:
    """Search the web."""
    return f"a page about {query}"


@tool(inline=True)
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"


@tool(inline=True, scopes={"billing"})
def void_invoice(invoice: str) -> str:
    """Void an invoice (billing staff only)."""
    return f"voided {invoice}"


def model(server: FakeServer, name: str) -> OpenAIChatModel:
    return OpenAIChatModel(name, base_url=server.base_url, api_key="sk-test")


def offered(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools", ())]


def systems(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "system"]


def result_of(request: dict[str, Any], call_id: str) -> Any:
    return next(json.loads(m["content"]) for m in request["messages"] if m.get("tool_call_id") == call_id)


def agents(server: FakeServer, **options: Any) -> tuple[Agent, Agent]:
    billing = Agent(
        model(server, "billing-model"),
        [refund],
        name="billing",
        system="You are billing.",
        instructions="Billing rules.",
        handoff_description="Refunds and invoices.",
    )
    triage = Agent(
        model(server, "triage-model"),
        [lookup],
        name="triage",
        system="You are triage.",
        instructions="Triage rules.",
        handoffs=[billing],
        **options,
    )
    return triage, billing


TRANSFER = ("c1", "transfer_to_billing", "{}")


def test_after_a_transfer_the_target_answers_with_its_model_tools_and_instructions_only() -> None:
    script = [
        tool_calls([("c0", "lookup", '{"order": "A1"}')]),
        tool_calls([TRANSFER]),
        tool_calls([("c2", "refund", '{"order": "A1"}')]),
        text("Refunded A1."),
    ]
    with FakeServer(script) as server:
        triage, _ = agents(server)
        result = triage.run_sync("I paid twice for A1")
    first, second, third, fourth = server.requests

    assert result.status is Status.COMPLETED and result.output == "Refunded A1."
    assert result.last_agent == "billing"
    assert [r["model"] for r in server.requests] == ["triage-model", "triage-model", "billing-model", "billing-model"]
    assert offered(first) == offered(second) == ["lookup", "transfer_to_billing"]
    assert offered(third) == offered(fourth) == ["refund"]
    assert systems(second) == ["You are triage.", "Triage rules."]
    assert systems(third) == systems(fourth) == ["You are billing.", "Billing rules."]
    transfer = next(t for t in first["tools"] if t["function"]["name"] == "transfer_to_billing")["function"]
    assert transfer["parameters"] == {"type": "object", "properties": {}, "additionalProperties": False}
    assert "Refunds and invoices." in transfer["description"]
    assert result_of(third, "c1") == {"ok": True, "result": {"transferred_to": "billing"}}
    assert result_of(fourth, "c2") == {"ok": True, "result": "refunded A1"}
    assert all("agent" not in m for r in server.requests for m in r["messages"])  # never sent to a model
    # Who answered: each step, each assistant message; the stored transcript keeps the starting agent's system.
    assert [s.agent for s in result.steps] == ["triage", "triage", "billing", "billing"]
    speakers = [m.agent for m in result.all_messages() if m.role == "assistant"]
    assert speakers == ["triage", "triage", "billing", "billing"]
    assert result.all_messages()[0].content == "You are triage."
    assert [s.to_dict()["agent"] for s in result.steps] == ["triage", "triage", "billing", "billing"]
    assert result.to_dict()["last_agent"] == "billing"
    # One run, one budget: usage kept adding up (10 + 5 tokens a reply).
    assert (result.usage.input_tokens, result.usage.output_tokens) == (40, 20)


def test_a_run_without_handoffs_names_no_agent_in_its_messages_and_checkpoints() -> None:
    with FakeServer([text("hi")]) as server:
        result = Agent(model(server, "m")).run_sync("hello")
    assert result.last_agent == "agent"
    assert result.state.agent is None and "agent" not in result.state.progress()
    assert all("agent" not in m.to_dict() for m in result.all_messages())
    assert "agent" not in result.steps[0].to_dict() and "last_agent" not in result.to_dict()


def test_a_tool_of_the_former_agent_is_unknown_after_the_transfer() -> None:
    script = [tool_calls([TRANSFER]), tool_calls([("c2", "lookup", '{"order": "A1"}')]), text("done")]
    with FakeServer(script) as server:
        triage, _ = agents(server)
        result = triage.run_sync("help")
    refused = result_of(server.requests[2], "c2")
    assert refused["ok"] is False
    assert refused["error"]["code"] == "unknown_tool"
    assert refused["error"]["message"] == "no tool named 'lookup'; available: refund"
    assert result.steps[1].calls[0].outcome == "unknown_tool" and not result.steps[1].calls[0].executed


def test_a_reply_with_a_transfer_and_other_calls_runs_them_then_transfers_once() -> None:
    """The other calls run for the agent that made them; the first transfer wins, a second is not executed."""
    second_desk = Agent(OpenAIChatModel("x", base_url="http://127.0.0.1:9/v1", api_key="k"), name="desk")
    script = [
        tool_calls(
            [
                ("c0", "lookup", '{"order": "A1"}'),
                TRANSFER,
                ("c2", "transfer_to_desk", "{}"),
                ("c3", "lookup", '{"order": "B2"}'),
            ]
        ),
        text("Billing here."),
    ]
    with FakeServer(script) as server:
        billing = Agent(model(server, "billing-model"), [refund], name="billing", approver=lambda call: True)
        triage = Agent(model(server, "triage-model"), [lookup], name="triage", handoffs=[billing, second_desk])
        result = triage.run_sync("help")
    after = server.requests[1]
    assert result_of(after, "c0") == {"ok": True, "result": "order A1: paid twice"}
    assert result_of(after, "c1") == {"ok": True, "result": {"transferred_to": "billing"}}
    assert result_of(after, "c2") == {
        "ok": False,
        "error": {
            "code": "tool_failed",
            "message": "not executed: call c1 of this reply already transfers the run",
            "retryable": False,
        },
    }
    assert result_of(after, "c3") == {"ok": True, "result": "order B2: paid twice"}
    assert after["model"] == "billing-model" and offered(after) == ["refund"]
    assert result.last_agent == "billing"
    assert [(c.tool, c.executed) for c in result.steps[0].calls] == [
        ("lookup", True),
        ("transfer_to_billing", True),
        ("transfer_to_desk", False),
        ("lookup", True),
    ]
    # The refused second transfer is no invalid call: the step is no failed repair.
    assert result.state.failed_repairs == 0


def test_a_transfer_the_last_step_may_not_run_hands_nothing_over() -> None:
    with FakeServer([tool_calls([TRANSFER])]) as server:
        triage, _ = agents(server, budget=Budget(max_steps=1))
        result = triage.run_sync("help")
    assert result.status is Status.MAX_STEPS
    assert result.last_agent == "triage" and result.state.agent == "triage"


def test_a_transfer_counts_against_the_tool_call_budget() -> None:
    script = [tool_calls([TRANSFER]), tool_calls([("c2", "refund", '{"order": "A1"}')])]
    with FakeServer(script) as server:
        triage, _ = agents(server, budget=Budget(max_tool_calls=1))
        result = triage.run_sync("help")
    assert result.status is Status.BUDGET_EXHAUSTED
    assert result.reason == "tool call budget of 1 would be exceeded"
    assert result.last_agent == "billing"


def test_taint_carries_across_the_transfer_and_the_targets_side_effect_needs_approval(tmp_path: Path) -> None:
    script = [
        tool_calls([("c0", "search", '{"query": "refund policy"}')]),
        tool_calls([TRANSFER]),
        tool_calls([("c2", "refund", '{"order": "A1"}')]),
    ]
    store = SQLiteStore(tmp_path / "runs.db")
    with FakeServer(script) as server:
        billing = Agent(model(server, "billing-model"), [refund], name="billing", store=store)
        triage = Agent(model(server, "triage-model"), [search], name="triage", handoffs=[billing], store=store)
        result = triage.run_sync("refund A1")
    assert result.status is Status.AWAITING_APPROVAL
    waiting = result.state.undecided()
    assert [(p.tool, p.approval_reason) for p in waiting] == [("refund", "the run read untrusted text from search")]
    assert result.last_agent == "billing"
    assert store.load(result.run_id).state.agent == "billing"
    assert store.verify(result.run_id) == []


def test_a_graph_that_could_pause_with_no_way_on_is_refused() -> None:
    """An untrusted result one agent reads makes another's side effect wait: the starting agent needs a way on."""
    with FakeServer([]) as server:
        billing = Agent(model(server, "b"), [refund], name="billing")
        with pytest.raises(ConfigurationError, match=r"has untrusted output.*handoff graph of agent 'triage'"):
            Agent(model(server, "t"), [search], name="triage", handoffs=[billing])


def test_the_targets_tools_are_those_its_principal_may_use() -> None:
    script = [
        tool_calls([TRANSFER]),
        tool_calls([("c2", "void_invoice", '{"invoice": "I-9"}')]),
        text("I cannot."),
        tool_calls([TRANSFER]),
        text("Billing staff here."),
    ]
    with FakeServer(script) as server:
        billing = Agent(model(server, "billing-model"), [refund, void_invoice], name="billing")
        triage = Agent(model(server, "triage-model"), [lookup], name="triage", handoffs=[billing])
        result = triage.run_sync("void I-9", principal=Principal("ann", scopes=frozenset()))
        staff = triage.run_sync("void I-9", principal=Principal("bob", scopes=frozenset({"billing"})))
    assert result.status is Status.COMPLETED and staff.status is Status.COMPLETED
    assert offered(server.requests[1]) == ["refund"]
    refused = result_of(server.requests[2], "c2")["error"]
    assert (refused["code"], refused["message"]) == ("unknown_tool", "no tool named 'void_invoice'; available: refund")
    assert offered(server.requests[4]) == ["refund", "void_invoice"]


def test_a_transfer_restricted_by_scopes_does_not_exist_for_other_principals() -> None:
    script = [tool_calls([("c1", "transfer_to_admin", "{}")]), text("I cannot do that.")]
    with FakeServer(script) as server:
        admin = Agent(model(server, "admin-model"), [refund], name="admin")
        desk = Agent(model(server, "desk-model"), [lookup], name="desk", handoffs=[handoff(admin, scopes={"admin"})])
        result = desk.run_sync("make me admin", principal=Principal("ann", scopes=frozenset()))
        assert "transfer_to_admin" not in offered(server.requests[0])
        assert result_of(server.requests[1], "c1")["error"]["code"] == "unknown_tool"
        assert result.last_agent == "desk" and server.requests[1]["model"] == "desk-model"
    with FakeServer([tool_calls([("c1", "transfer_to_admin", "{}")]), text("admin here")]) as server:
        admin = Agent(model(server, "admin-model"), name="admin")
        desk = Agent(model(server, "desk-model"), name="desk", handoffs=[handoff(admin, scopes={"admin"})])
        result = desk.run_sync("hi", principal=Principal("root", scopes=frozenset({"admin"})))
    assert offered(server.requests[0]) == ["transfer_to_admin"]
    assert result.last_agent == "admin" and server.requests[1]["model"] == "admin-model"


def test_the_targets_output_type_applies_after_the_transfer() -> None:
    class Refund(BaseModel):
        order: str
        amount: int

    script = [tool_calls([TRANSFER]), text('{"order": "A1", "amount": 40}')]
    with FakeServer(script) as server:
        billing = Agent(model(server, "billing-model"), name="billing", output_type=Refund)
        triage = Agent(model(server, "triage-model"), name="triage", handoffs=[billing])
        result = triage.run_sync("refund A1")
    assert "response_format" not in server.requests[0]
    assert server.requests[1]["response_format"]["json_schema"]["name"]
    assert result.output == Refund(order="A1", amount=40)


def test_a_runs_own_output_type_and_instructions_hold_whichever_agent_has_the_floor() -> None:
    class Refund(BaseModel):
        order: str
        amount: int

    script = [tool_calls([TRANSFER]), text('{"order": "A1", "amount": 40}')]
    with FakeServer(script) as server:
        triage, _ = agents(server)
        result = triage.run_sync("refund A1", output_type=Refund, instructions="Be exact.")
    first, second = server.requests
    assert first["response_format"] == second["response_format"]
    assert second["response_format"]["json_schema"]["schema"]["required"] == ["order", "amount"]
    assert systems(first) == ["You are triage.", "Be exact."]
    assert systems(second) == ["You are billing.", "Be exact."]
    assert result.output == Refund(order="A1", amount=40)


def test_a_cycle_hands_the_run_back() -> None:
    script = [
        tool_calls([("c1", "transfer_to_b", "{}")]),
        tool_calls([("c2", "transfer_to_a", "{}")]),
        text("a again"),
    ]
    with FakeServer(script) as server:
        b = Agent(model(server, "b-model"), name="b", system="You are b.")
        a = Agent(model(server, "a-model"), name="a", system="You are a.", handoffs=[b])
        b.add_handoffs(a)
        result = a.run_sync("ping")
    assert [r["model"] for r in server.requests] == ["a-model", "b-model", "a-model"]
    assert [systems(r) for r in server.requests] == [["You are a."], ["You are b."], ["You are a."]]
    assert [m.agent for m in result.all_messages() if m.role == "assistant"] == ["a", "b", "a"]
    assert result.last_agent == "a"
    assert list(a.handoff_graph()) == ["a", "b"] and list(b.handoff_graph()) == ["b", "a"]


async def test_a_streamed_run_says_which_agent_answers() -> None:
    script = [tool_calls([TRANSFER]), text("Billing here.")]
    with FakeServer(script) as server:
        triage, _ = agents(server)
        events = [event async for event in triage.stream("help")]
        await triage.aclose()
    started = [e for e in events if isinstance(e, StepStarted)]
    assert [(e.agent, e.model) for e in started] == [("triage", "triage-model"), ("billing", "billing-model")]
    finished = [e for e in events if isinstance(e, StepFinished)]
    assert [(e.step, e.agent) for e in finished] == [(1, "triage"), (2, "billing")]
    handed = [e for e in events if isinstance(e, HandedOff)]
    assert [(e.call_id, e.from_agent, e.to_agent, e.agent) for e in handed] == [("c1", "triage", "billing", "billing")]
    assert events.index(handed[0]) < events.index(started[1])
    assert {e.agent for e in events if isinstance(e, TextDelta)} == {"billing"}
    last = events[-1]
    assert isinstance(last, RunFinished) and last.agent == "billing" and last.result.last_agent == "billing"


# --- bad graphs: refused when the Agent is built, handoffs are added, or a run starts ---------------------------


def test_names_that_cannot_be_tool_names_are_refused() -> None:
    scripted = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    for bad in ("Billing agent", "", "x" * 53, "billing/eu", 7):
        with pytest.raises(ConfigurationError, match=r"becomes the tool name transfer_to_<name>"):
            Agent(scripted, name=bad)  # type: ignore[arg-type]
    assert Agent(scripted, name="x" * 52).name == "x" * 52


def test_a_transfer_named_like_one_of_the_agents_tools_is_refused() -> None:
    scripted = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", api_key="k")

    @tool(read_only=True)
    def transfer_to_billing() -> str:
        """Not a transfer."""
        return "no"

    billing = Agent(scripted, name="billing")
    with pytest.raises(ConfigurationError, match=r"tool named 'transfer_to_billing', the name of its transfer"):
        Agent(scripted, [transfer_to_billing], name="triage", handoffs=[billing])


def test_two_agents_of_one_name_in_a_graph_are_refused() -> None:
    scripted = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    one, other = Agent(scripted, name="billing"), Agent(scripted, name="billing")
    with pytest.raises(ConfigurationError, match=r"two handoffs to an agent named 'billing'"):
        Agent(scripted, name="triage", handoffs=[one, other])
    deep = Agent(scripted, name="desk", handoffs=[other])
    with pytest.raises(ConfigurationError, match=r"graph of agent 'triage' are named 'billing'"):
        Agent(scripted, name="triage", handoffs=[one, deep])
    # Unnamed agents share the default name.
    with pytest.raises(ConfigurationError, match=r"are named 'agent'"):
        Agent(scripted, handoffs=[Agent(scripted)])
    with pytest.raises(ConfigurationError, match=r"must be Agents"):
        Agent(scripted, name="triage", handoffs=[one, "billing"])  # type: ignore[list-item]
    for alone in (one, "billing", handoff(one)):
        with pytest.raises(ConfigurationError, match=r"handoffs must be a list of Agents"):
            Agent(scripted, name="triage", handoffs=alone)  # type: ignore[arg-type]


def test_a_graph_broken_after_it_was_built_is_refused_when_a_run_starts() -> None:
    scripted = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    desk = Agent(scripted, name="desk")
    triage = Agent(scripted, name="triage", handoffs=[desk])
    desk.add_handoffs(Agent(scripted, name="triage"))  # fine for desk's own graph, not for triage's
    with pytest.raises(ConfigurationError, match=r"graph of agent 'triage' are named 'triage'"):
        triage.run_sync("hi")
    before = triage.handoffs
    with pytest.raises(ConfigurationError):
        triage.add_handoffs(Agent(scripted, name="desk"))
    assert triage.handoffs == before  # a refused add changes nothing


def test_after_a_transfer_the_targets_model_settings_go_over_the_runs() -> None:
    with FakeServer([tool_calls([TRANSFER]), text("Billing here.")]) as server:
        billing = Agent(
            model(server, "billing-model"), [refund], name="billing", model_settings=ModelSettings(max_tokens=50)
        )
        triage = Agent(
            model(server, "triage-model"),
            [lookup],
            name="triage",
            handoffs=[billing],
            model_settings=ModelSettings(temperature=0.1, max_tokens=400),
        )
        triage.run_sync("help", model_settings=ModelSettings(seed=7))
    first, second = server.requests
    assert (first["temperature"], first["max_tokens"], first["seed"]) == (0.1, 400, 7)
    assert (second["temperature"], second["max_tokens"], second["seed"]) == (0.1, 50, 7)
