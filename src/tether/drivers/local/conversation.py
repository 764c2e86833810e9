"""Conversations: runs (turns) that share history, principal, usage totals and a budget.

    conv = agent.conversation()                     # or agent.conversation(conversation_id) to go on
    first = await conv.send("What is 248 times 15?")
    second = await conv.send("And divided by 4?")   # sees the first turn
    conv.usage, conv.turns

Each turn is a run of its own (with its own steps, events and ledger) whose
messages start with everything earlier turns said. With a store, the
conversation and its turns are recorded: a turn stores only the messages it
adds, never the history again, so the 50th turn costs what the 2nd did
(beyond the messages sent to the model), and ``agent.conversation(id)``
carries on after a crash or in another process.

A conversation's budget (``ConversationBudget``) counts over all turns: a
turn runs with whatever is left of it, so it ends ``budget_exhausted`` like
any run when the conversation has used its share.

Every gate of a run holds across its turns:

- A conversation belongs to its principal: ``agent.conversation(id)`` for
  anyone else fails as for an id that does not exist.
- Taint lasts as long as the text that caused it is in what the model sees:
  a turn whose history holds a result someone else wrote (a web page, a
  file, an MCP result) starts tainted, so its side effects need approval.
- With a store, the conversation's row (principal, budget) is sealed and its
  turns chained; the whole chain is checked before each turn runs, and an
  edit anywhere in it stops the conversation (``TamperedRun``).

After a handoff (``tether.drivers.local.handoffs``) the agent that had the
floor when a turn ended answers the next one (``last_agent``), as a person
chatting expects; a conversation opened again from the store goes on with
it too, found by name in the handoff graph of the agent that opens it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Protocol

from tether.core.budget import RunConfig
from tether.core.errors import ConfigurationError, RunNotFound, TamperedRun
from tether.core.events import EventHandler
from tether.core.machine import RunState, Status
from tether.core.messages import Message, Usage
from tether.core.report import RunResult
from tether.core.settings import ModelSettings
from tether.drivers.ids import new_id
from tether.tools.context import Principal

if TYPE_CHECKING:
    from tether.store.base import RunStore


class TurnDriver(Protocol):
    """What a conversation needs of the driver of one of its turns (``tether.drivers.local.runner.Driver``)."""

    on_result: Callable[[RunResult], None] | None
    prompt_from: int

    async def run(self) -> RunResult: ...


class _Principals(Protocol):
    @property
    def principal(self) -> Principal: ...


class Conversing(Protocol):
    """What a conversation needs of its agent (``tether.drivers.local.runner.Agent``)."""

    @property
    def store(self) -> RunStore | None: ...

    @property
    def config(self) -> RunConfig: ...

    @property
    def toolbox(self) -> _Principals: ...

    def driver(
        self,
        prompt: str | Sequence[Message],
        *,
        run_id: str | None = None,
        on_event: EventHandler | None = None,
        deps: Any = None,
        principal: Principal | None = None,
        config: RunConfig | None = None,
        turn: tuple[str, int, int] | None = None,
        untrusted: Mapping[str, str] | None = None,
        output_type: Any = None,
        instructions: Any = None,
        floor: str | None = None,
        model_settings: ModelSettings | None = None,
    ) -> TurnDriver: ...


__all__ = ["Conversation", "ConversationBudget"]


@dataclass(frozen=True, slots=True)
class ConversationBudget:
    """Limits over all the turns of a conversation; ``None`` is unlimited."""

    max_turns: int | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The budget as plain JSON data, as the store keeps it."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Conversation:
    """A sequence of runs sharing history. Get one from ``Agent.conversation``."""

    def __init__(
        self,
        agent: Conversing,
        conversation_id: str,
        principal: Principal,
        budget: ConversationBudget,
        *,
        history: Sequence[Message] = (),
        turns: int = 0,
        usage: Usage | None = None,
        stored: bool = False,
        untrusted: dict[str, str] | None = None,
        last_agent: str | None = None,
    ) -> None:
        self.agent = agent
        self.id = conversation_id
        self.principal = principal
        self.budget = budget
        self.messages: list[Message] = list(history)
        self.turns = turns
        self.usage = usage or Usage()
        self._stored = stored
        self.untrusted = dict(untrusted or {})  # call id -> tool: results in ``messages`` others wrote
        self._lock = asyncio.Lock()  # turns of one conversation never overlap
        self._waiting: str | None = None  # the run of a turn that paused (for an approval)
        # The agent that had the floor when the last turn ended, which answers the next (None: no handoffs).
        self.last_agent = last_agent

    async def send(
        self,
        text: str,
        *,
        deps: Any = None,
        on_event: EventHandler | None = None,
        run_id: str | None = None,
        output_type: Any = None,
        instructions: Any = None,
        model_settings: ModelSettings | None = None,
    ) -> RunResult:
        """Run one turn: ``text`` as the user's message after everything said so far.

        ``output_type``, ``instructions`` and ``model_settings`` override the Agent's for this turn (as
        ``Agent.run``'s do; settings field by field).
        """
        async with self._lock:
            turn = self.turn(
                text,
                deps=deps,
                on_event=on_event,
                run_id=run_id,
                output_type=output_type,
                instructions=instructions,
                model_settings=model_settings,
            )
            return await turn.run()

    def turn(
        self,
        text: str,
        *,
        deps: Any = None,
        on_event: EventHandler | None = None,
        run_id: str | None = None,
        output_type: Any = None,
        instructions: Any = None,
        model_settings: ModelSettings | None = None,
    ) -> TurnDriver:
        """The driver of the next turn, for callers that drive it themselves (``send`` runs it)."""
        if self._waiting is not None:
            raise ConfigurationError(
                f"the last turn (run {self._waiting}) is paused: finish it with "
                f"agent.resume({self._waiting!r}).run(), then reopen the conversation"
            )
        store = self.agent.store
        if store is not None and not self._stored:
            store.create_conversation(self.id, self.principal, self.budget.to_dict())
            self._stored = True
        elif store is not None and (problems := store.verify_conversation(self.id)):
            raise TamperedRun(
                f"conversation {self.id} fails its audit check ({problems[0]}); no turn of it runs"
                f" (see tether runs verify)"
            )
        driver = self.agent.driver(
            [*self.messages, Message("user", text)],
            run_id=run_id,
            on_event=on_event,
            deps=deps,
            principal=self.principal,
            config=self._turn_config(),
            turn=(self.id, self.turns + 1, len(self.messages)),
            untrusted=self.untrusted,
            output_type=output_type,
            instructions=instructions,
            floor=self.last_agent,
            model_settings=model_settings,
        )
        self.turns += 1
        driver.on_result = self._after_turn
        driver.prompt_from = len(self.messages)
        return driver

    def _after_turn(self, result: RunResult) -> None:
        self.messages = result.state.messages
        self.untrusted = dict(result.state.untrusted)
        self.last_agent = result.state.agent
        self._waiting = None if result.status.terminal else result.run_id
        self.usage = self.usage + result.usage

    def send_sync(self, text: str, *, deps: Any = None, on_event: EventHandler | None = None) -> RunResult:
        """``send`` for a script without an event loop."""
        return asyncio.run(self.send(text, deps=deps, on_event=on_event))

    def _turn_config(self) -> RunConfig:
        """The agent's run configuration with the conversation's remaining budget folded in."""
        b, used, config = self.budget, self.usage, self.agent.config
        if b.max_turns is not None and self.turns >= b.max_turns:
            raise ConfigurationError(
                f"conversation {self.id} has had its {b.max_turns} turns (ConversationBudget.max_turns)"
            )
        limits = config.budget
        for name, spent in (
            ("max_input_tokens", used.input_tokens),
            ("max_output_tokens", used.output_tokens),
            ("max_total_tokens", used.total_tokens),
        ):
            total = getattr(b, name)
            if total is None:
                continue
            left = max(0, total - spent)
            mine = getattr(limits, name)
            limits = replace(limits, **{name: left if mine is None else min(mine, left)})
        return replace(config, budget=limits)


def open_conversation(
    agent: Conversing,
    conversation_id: str | None,
    principal: Principal | None,
    budget: ConversationBudget | None,
) -> Conversation:
    """A new conversation, or a stored one to go on with (``Agent.conversation``).

    A stored conversation is opened only for its own principal (``principal``,
    else the agent's): for anyone else it does not exist. Its turns run as
    the principal given, else as the one it was started for.
    """
    who = principal or agent.toolbox.principal
    if conversation_id is None:
        return Conversation(agent, new_id(), who, budget or ConversationBudget())
    store = agent.store
    if store is None:
        raise ConfigurationError("going on with a conversation by its id needs an Agent with a store")
    stored = store.load_conversation(conversation_id)
    if stored.principal.id != who.id:
        raise RunNotFound(f"no conversation {conversation_id} in {store.path}")
    if problems := store.verify_conversation(conversation_id):
        raise TamperedRun(
            f"conversation {conversation_id} fails its audit check ({problems[0]}); nothing of it is acted on"
            " (see tether runs verify)"
        )
    history: list[Message] = []
    untrusted: dict[str, str] = {}
    last_agent = None
    if stored.turns:
        last_run, status = stored.turns[-1]
        if not Status(status).terminal:
            raise ConfigurationError(
                f"the last turn of conversation {conversation_id} (run {last_run}) is {status}: "
                f"finish it first with agent.resume({last_run!r}).run()"
            )
        last = store.load(last_run).state  # checked: the turn, its conversation and every earlier turn
        history, untrusted, last_agent = last.messages, _untrusted(last), last.agent
    return Conversation(
        agent,
        conversation_id,
        principal or stored.principal,
        budget or ConversationBudget(**stored.budget),
        history=history,
        turns=len(stored.turns),
        usage=Usage(*stored.usage),
        stored=True,
        untrusted=untrusted,
        last_agent=last_agent,
    )


def _untrusted(state: RunState) -> dict[str, str]:
    """The results in ``state``'s messages that someone other than the principal wrote.

    A run saved before these were listed says only that it was tainted:
    then every tool result in it counts.
    """
    if state.untrusted or not state.tainted:
        return dict(state.untrusted)
    tool = state.tainted_by or "a tool"
    return {m.tool_call_id: tool for m in state.messages if m.role == "tool" and m.tool_call_id}
