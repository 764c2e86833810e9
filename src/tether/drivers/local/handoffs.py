"""Handoffs: an agent hands the run, and the conversation, to another agent.

    billing = Agent(model, [refund], name="billing", handoff_description="Refunds and invoices.")
    triage = Agent(model, [search_kb], name="triage", handoffs=[billing], store=store)
    result = await triage.run("I was charged twice")
    result.last_agent                                  # "billing"

An agent with handoffs offers its model one more tool per target,
``transfer_to_<name>`` (no parameters). When the model calls it, the target
goes on with the same run: from the next model request on, the target's
model, tools (as ``toolbox_for`` offers them to the run's principal),
``system``, instructions, history processors, output type and output
validators apply, its model settings over the run's, and the transfer call's result says it happened
(``{"transferred_to": "billing"}``). Everything that belongs to the run
stays: its id, store, ledger, budget (usage keeps adding up), principal,
taint, deps, approver and clock (the starting agent's).

Rules, each decided here or in the run state machine:

- A transfer is a decision with no side effect. A reply's other calls pass
  every gate and run as usual, for the agent that made them; the transfer
  takes effect once the step's calls are done. The first transfer of a
  reply wins; a later one is not executed (``tool_failed``: "call c1 of
  this reply already transfers the run"). A transfer that did not run (the
  run ended at that step, a budget refused it) hands nothing over.
- A transfer counts as a tool call (``Budget.max_tool_calls``).
- ``handoff(agent, scopes={...})`` offers a transfer only to principals
  holding those scopes; for any other it does not exist (``unknown_tool``),
  like a tool the principal may not call.
- Names: an agent's name becomes the tool name ``transfer_to_<name>``, so it
  is 1 to 52 letters, digits, ``_`` or ``-`` (default ``"agent"``). Names
  are unique in a handoff graph, since a run records by name who has the
  floor; a transfer's name may not be one of the agent's own tools. Cycles
  (A→B→A) are allowed: ``a.add_handoffs(b)`` after both exist. Each is a
  ``ConfigurationError`` when the Agent is built, ``add_handoffs`` is
  called, or a run starts or resumes.
- A run's own ``output_type`` and ``instructions`` (``run(...,
  output_type=...)``) hold for the whole run, whichever agent has the
  floor. The starting agent's ``system`` message stays first in the stored
  transcript; a request made for another agent sends that agent's
  ``system`` in its place (or none).
- The floor is part of the run's state (``RunState.agent``, sealed with the
  run): a resumed run goes on with the agent that had it, found by name in
  the handoff graph of the agent given to ``resume``. A name that graph no
  longer has is a ``ConfigurationError`` naming it, and the run is left as
  it was. A conversation's next turn starts with the agent that had the
  floor when the last turn ended (``Conversation.last_agent``), also when
  it is opened again from the store.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tether.core.deferred import deferred
from tether.core.envelope import outcome_code
from tether.core.errors import ConfigurationError
from tether.core.events import HANDOFF
from tether.tools.tool import Tool, tool_from_schema
from tether.tools.toolbox import Toolbox

if TYPE_CHECKING:
    from tether.core import machine
    from tether.core.machine import Accepted, CallModel, Rejected, Run, RunTools
    from tether.core.messages import Message, ToolCall
    from tether.drivers.local.hooks import Hook
    from tether.models.base import Model
    from tether.store.base import RunStore
    from tether.tools.context import Principal
    from tether.tools.output import OutputSpec
else:
    # The state machine is needed once a run starts, not to build an agent (issue 19: the cost of the import).
    machine = deferred("tether.core.machine")

__all__ = ["DEFAULT_NAME", "TRANSFER_PREFIX", "Floor", "Handoff", "handoff"]

DEFAULT_NAME = "agent"
TRANSFER_PREFIX = "transfer_to_"
# A tool name is at most 64 characters (tether.tools.tool.NAME_PATTERN); the prefix takes 12 of them.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,52}$")


@runtime_checkable
class HandingOff(Protocol):
    """What a handoff needs of an agent (``tether.drivers.local.runner.Agent``)."""

    @property
    def name(self) -> str: ...

    @property
    def system(self) -> str | None: ...

    @property
    def handoff_description(self) -> str | None: ...

    @property
    def handoffs(self) -> tuple[Handoff, ...]: ...

    @property
    def tools(self) -> list[Tool]: ...

    @property
    def model(self) -> Model: ...

    @property
    def store(self) -> RunStore | None: ...

    @property
    def approver(self) -> Any: ...

    @property
    def propose_only(self) -> bool: ...

    @property
    def _instructions(self) -> tuple[str | Hook, ...]: ...

    def toolbox_for(self, principal: Principal) -> Toolbox: ...

    def output_spec(self, output_type: Any) -> OutputSpec | None: ...


class Seated(Protocol):
    """What a handoff changes in a run's driver (``tether.drivers.local.runner.Driver``)."""

    floor: Any  # the agent holding the floor
    handoffs: Floor | None
    toolbox: Toolbox
    output: OutputSpec | None
    instructions: tuple[str | Hook, ...]
    run_machine: Run

    def _emit(self, kind: str, **data: Any) -> None: ...


@dataclass(frozen=True, slots=True)
class Handoff:
    """A transfer an agent offers its model: to ``agent``, for principals holding ``scopes`` (``handoff``)."""

    agent: HandingOff
    scopes: frozenset[str] = frozenset()
    description: str | None = None  # what the model reads about the target; else its ``handoff_description``

    @property
    def tool_name(self) -> str:
        """The tool name the model calls to hand the floor over: ``transfer_to_`` and the agent's name."""
        return TRANSFER_PREFIX + self.agent.name


def handoff(agent: HandingOff, *, scopes: Iterable[str] = (), description: str | None = None) -> Handoff:
    """A transfer to ``agent`` offered only to principals holding ``scopes``, described to the model by
    ``description`` (else by the agent's ``handoff_description``).

    ``Agent(model, name="desk", handoffs=[billing, handoff(admin, scopes={"admin"})])``
    """
    if not isinstance(agent, HandingOff):
        raise ConfigurationError(f"handoff() takes an Agent, not {type(agent).__name__}")
    if isinstance(scopes, str):
        raise ConfigurationError(f"scopes must be a set of scope names, e.g. {{{scopes!r}}}, not a string")
    return Handoff(agent, frozenset(scopes), description)


def checked_name(name: object) -> str:
    """An agent's name, once it can be part of a tool name."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ConfigurationError(
            f"an Agent's name becomes the tool name {TRANSFER_PREFIX}<name>, so {name!r} will not do: "
            "use 1 to 52 letters, digits, '_' or '-' (e.g. name='billing')"
        )
    return name


def listed(targets: object) -> list[Any]:
    """``Agent(handoffs=...)`` as a list, or a ``ConfigurationError`` saying what it must be."""
    if isinstance(targets, str | Handoff | HandingOff) or not isinstance(targets, Iterable):
        raise ConfigurationError(
            f"handoffs must be a list of Agents (or handoff(agent, ...)), e.g. handoffs=[billing], "
            f"not {type(targets).__name__}"
        )
    return list(targets)


def transfers(owner: str, tools: Sequence[Tool], targets: Iterable[object]) -> tuple[tuple[Handoff, ...], list[Tool]]:
    """``targets`` (Agents or ``Handoff``\\ s) as checked handoffs of the agent named ``owner``, and their tools."""
    found: list[Handoff] = []
    for item in targets:
        if isinstance(item, Handoff):
            found.append(item)
        elif isinstance(item, HandingOff):
            found.append(Handoff(item))
        else:
            raise ConfigurationError(
                f"handoffs of agent {owner!r} must be Agents (or handoff(agent, ...)), not {type(item).__name__}"
            )
    own = {t.name for t in tools}
    seen: set[str] = set()
    for item in found:
        name = item.agent.name
        if item.tool_name in own:
            raise ConfigurationError(
                f"agent {owner!r} has a tool named {item.tool_name!r}, the name of its transfer to agent {name!r}: "
                "rename the tool or that agent"
            )
        if name in seen:
            raise ConfigurationError(f"agent {owner!r} has two handoffs to an agent named {name!r}; keep one")
        seen.add(name)
    return tuple(found), [_transfer_tool(item) for item in found]


def _transfer_tool(item: Handoff) -> Tool:
    """The tool the model calls to hand the run to ``item.agent``: it does nothing but say so."""
    target = item.agent.name
    about = item.description if item.description is not None else item.agent.handoff_description

    def transfer() -> dict[str, str]:
        return {"transferred_to": target}

    description = f"Hand the conversation over to the agent {target}, which answers from then on."
    return tool_from_schema(
        item.tool_name,
        {"type": "object", "properties": {}},
        transfer,
        f"{description} {about}" if about else description,
        read_only=True,
        inline=True,
        timeout=None,
        scopes=item.scopes,
    )


def graph(root: HandingOff, first: Sequence[Handoff] | None = None) -> dict[str, HandingOff]:
    """Every agent ``root`` reaches by handoffs (``first``: root's own, if not yet its ``handoffs``), by name.

    Raises ``ConfigurationError`` when two agents of the graph share a name.
    """
    found: dict[str, HandingOff] = {}
    todo: list[tuple[HandingOff, Sequence[Handoff]]] = [(root, root.handoffs if first is None else first)]
    while todo:
        agent, edges = todo.pop()
        known = found.get(agent.name)
        if known is agent:
            continue
        if known is not None:
            raise ConfigurationError(
                f"two agents in the handoff graph of agent {root.name!r} are named {agent.name!r}: a run records "
                "by name which agent has the floor, so give each its own (Agent(name=...))"
            )
        found[agent.name] = agent
        todo.extend((h.agent, h.agent.handoffs) for h in reversed(edges))
    return found


def checked_graph(
    root: HandingOff,
    unattended: Callable[[Sequence[Tool]], str | None],
    first: Sequence[Handoff] | None = None,
) -> dict[str, HandingOff]:
    """``graph``, once a run of ``root`` could go on wherever it pauses for approval.

    ``unattended`` says why a run with these tools may pause for approval
    (``runner.approval_reason``): across a graph, an untrusted result read by
    one agent makes another's side effect wait, so the starting agent, whose
    store and approver the whole run uses, needs one of them.
    """
    agents = graph(root, first)
    if len(agents) > 1 and root.store is None and root.approver is None and not root.propose_only:
        why = unattended([t for agent in agents.values() for t in agent.tools])
        if why is not None:
            raise ConfigurationError(
                f"{why} (in the handoff graph of agent {root.name!r}), but agent {root.name!r}, whose store and "
                "approver its runs use, has neither: pass it approver=... or store=SQLiteStore(...)"
            )
    return agents


class _Catalog:
    """An agent's toolbox as the run state machine sees it, with its transfers marked as such."""

    def __init__(self, toolbox: Toolbox, targets: Mapping[str, str]) -> None:
        self.toolbox = toolbox
        self.targets = targets  # transfer tool name -> target agent name

    def check(self, call: ToolCall) -> Accepted | Rejected:
        verdict = self.toolbox.check(call)
        target = self.targets.get(call.name)
        if target is not None and isinstance(verdict, machine.Accepted):
            return replace(verdict, handoff=target)
        return verdict


class Floor:
    """Which agent of a run's handoff graph has the floor, and what passing it changes in the driver."""

    def __init__(
        self,
        root: HandingOff,
        agents: Mapping[str, HandingOff],
        current: HandingOff,
        output_type: Any,
        instructions_fixed: bool,
    ) -> None:
        self.root = root  # the agent the run (or its conversation) started with: its system message is stored
        self.agents = agents
        self.current = current
        self.output_type = output_type  # the run's own, for every agent; None: each agent's own
        self.instructions_fixed = instructions_fixed  # the run has instructions of its own

    @classmethod
    def open(
        cls,
        root: HandingOff,
        name: str | None,
        output_type: Any,
        instructions_fixed: bool,
        unattended: Callable[[Sequence[Tool]], str | None],
    ) -> Floor:
        """The floor of a run of ``root`` that starts or goes on with the agent named ``name`` (None: ``root``)."""
        agents = checked_graph(root, unattended)
        current = agents.get(root.name if name is None else name)
        if current is None:
            raise ConfigurationError(
                f"agent {name!r} had the floor, but the handoff graph of agent {root.name!r} has no agent of that "
                f"name (it has {', '.join(repr(n) for n in agents)}): go on with the agent it started with, "
                "with the same handoffs"
            )
        return cls(root, agents, current, output_type, instructions_fixed)

    def seat(self, driver: Seated) -> None:
        """Set ``driver`` up for the agent that has the floor (as the run starts or resumes)."""
        driver.handoffs = self
        self._give(driver, self.current)

    def _give(self, driver: Seated, agent: HandingOff) -> None:
        toolbox = agent.toolbox_for(driver.toolbox.principal)
        output = agent.output_spec(self.output_type)
        driver.floor, driver.toolbox, driver.output = agent, toolbox, output
        if not self.instructions_fixed:
            driver.instructions = agent._instructions
        targets = {h.tool_name: h.agent.name for h in agent.handoffs}
        catalog = _Catalog(toolbox, targets) if targets else toolbox
        driver.run_machine.hand_off(agent.name, catalog, output, described_by=toolbox.described_by)
        self.current = agent

    def after_tools(self, driver: Seated, command: RunTools, finished: Mapping[str, str]) -> None:
        """Pass the floor if a transfer of this step ran (the machine executes at most one per reply)."""
        targets = {h.tool_name: h.agent.name for h in self.current.handoffs}
        for call in command.calls:
            target = self.agents.get(targets.get(call.tool, ""))
            if call.execute and target is not None and outcome_code(finished.get(call.call_id, "")) == "ok":
                data = {"id": call.call_id, "from": self.current.name, "to": target.name, "model": target.model.name}
                driver._emit(HANDOFF, **data)
                self._give(driver, target)
                return

    def request(self, command: CallModel) -> CallModel:
        """``command`` as the agent holding the floor sends it: its own leading system messages, not the root's."""
        if self.current is self.root:
            return command
        theirs, mine = self._leading(self.root), self._leading(self.current)
        messages = command.messages
        start = 0
        while start < len(messages) and messages[start].role == "system" and messages[start] in (*theirs, *mine):
            start += 1
        return replace(command, messages=(*mine, *messages[start:]))

    def _leading(self, agent: HandingOff) -> list[Message]:
        """The system messages a run of ``agent`` alone would start with: its ``system``, a prompted output's."""
        # A run needs the messages module, building an agent does not (issue 19: the cost of the import).
        from tether.core.messages import Message

        leading = [Message("system", agent.system)] if agent.system is not None else []
        spec = agent.output_spec(self.output_type)
        if spec is not None and spec.mode == "prompted":
            leading.append(Message("system", spec.instructions()))
        return leading
