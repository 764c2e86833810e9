"""A served Agent whose runs are Temporal workflows (``tether serve TARGET --engine temporal``).

``TemporalRuns`` is ``AgentRuns`` with the driving moved to Temporal
workers (``tether worker``), as for ``tether run --engine temporal``: a
run is recorded in the run store and started as a workflow before the
202; approvals and unknown outcomes are decided by the ``decide`` and
``reconcile`` updates ``tether approve --temporal`` sends; a cancel
cancels the workflow. Everything read (a run, the list, the inbox, the
events) is read from the run store the workers write to, so the service
and every worker must share it; who sees what is as for ``AgentRuns``.

The model and the tools are the workers': the served Agent only names the
service and carries its system prompt and budget to each run. What the
workflow cannot carry (sub-agent tools, handoffs, instructions functions,
an output type, model settings, deps, history processors) is refused when
the app is made. Conversations are not run on Temporal: their routes answer
501, and A2A (whose messages are conversation turns) is refused with it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.core.errors import ConfigurationError, NotWaiting
from tether.core.events import RUN_FINISHED
from tether.core.machine import Cancel, Run, Status
from tether.drivers.ids import new_id
from tether.drivers.local.runner import Agent
from tether.drivers.local.subagents import AgentTool
from tether.serve.problems import Problem
from tether.serve.runs import AgentRuns, Caller, waiting_for_a_person
from tether.serve.service import Caller as Owner
from tether.serve.service import LiveRun
from tether.serve.settings import Settings
from tether.store import LeaseHeld, RunStore, StoreError, TamperedRun
from tether.store.records import tampered
from tether.tools.toolbox import Toolbox

if TYPE_CHECKING:
    from temporalio.client import Client

log = logging.getLogger("tether.serve")

ENGINES = ("local", "temporal")
DEFAULT_TASK_QUEUE = "tether"  # as `tether worker` and `tether run --engine temporal`
CLOSE_SECONDS = 30.0  # how long a cancel waits for the workflow to close before answering 503
RECORDED_SECONDS = 10.0  # how long an answered decision waits for the workers to record it
RECORDED_POLL_SECONDS = 0.05
NO_CONVERSATIONS = "conversations are not run on Temporal: serve this agent without --engine temporal for them"


def check_carried(agent: Agent) -> None:
    """Raise ``ConfigurationError`` naming what of ``agent`` a Temporal run cannot carry (the workers run their own
    model and tools; a run takes only its prompt, system prompt, budget and principal)."""
    nested = [t.name for t in agent.tools if isinstance(t, AgentTool)]
    found = [f"sub-agent tools ({', '.join(nested)})"] if nested else []
    found += [what for what, given in (
        ("handoffs", agent.handoffs),
        ("instructions functions", agent._instructions),
        ("an output type", agent._output_type is not None),
        ("model settings", agent.model_settings is not None),
        ("a deps factory", agent.deps_factory is not None),
        ("history processors", agent.history_processors),
        ("a system prompt that is not text", agent.system is not None and not isinstance(agent.system, str)),
    ) if given]  # fmt: skip
    if found:
        raise ConfigurationError(
            f"agent {agent.name!r} has {', '.join(found)}, which a Temporal run does not carry (its workers run "
            "their own model and tools): serve it without --engine temporal, or leave them out"
        )
    if agent.resolve_principal is not None:  # a gate: never dropped in silence
        raise ConfigurationError(
            f"agent {agent.name!r} has a resolve_principal, which a Temporal run does not carry (its workers ask "
            "their own before each call): give it to the workers, tether worker --resolve-principal MODULE:NAME "
            "or make_worker(..., resolve_principal=...), and leave it out of the served agent"
        )


def check_engine(agent: Agent, engine: str, temporal: str | None, *, a2a: bool = False) -> None:
    """Raise ``ConfigurationError`` when ``agent``'s runs cannot be driven on ``engine`` as asked."""
    if engine not in ENGINES:
        raise ConfigurationError(f"engine {engine!r}: not one of {', '.join(ENGINES)}")
    if engine != "temporal":
        return
    if not temporal:
        raise ConfigurationError("--engine temporal needs the Temporal server: --temporal HOST:PORT")
    if a2a:  # every A2A message is a turn of its context's conversation
        raise ConfigurationError(f"--a2a cannot be served with --engine temporal: {NO_CONVERSATIONS}")
    check_carried(agent)


async def connected(address: str) -> Client:
    """A client of the Temporal server at ``address``; ``ConfigurationError`` when it cannot be reached."""
    from temporalio.service import RPCError

    from tether.drivers.temporal.client import connect

    try:
        return await connect(address)
    except (RPCError, RuntimeError) as exc:
        raise ConfigurationError(f"cannot reach the Temporal server at {address}: {exc}") from exc


def check_reachable(address: str) -> None:
    """Raise ``ConfigurationError`` unless the Temporal server at ``address`` answers (before anything listens)."""
    asyncio.run(connected(address))


class TemporalRuns(AgentRuns):
    """The runs of one served Agent, started, decided and cancelled on Temporal; read from the shared run store."""

    def __init__(self, settings: Settings, store: RunStore, agent: Agent, *, address: str, task_queue: str) -> None:
        check_carried(agent)
        try:
            import temporalio  # noqa: F401
        except ImportError:
            needs = "--engine temporal needs the temporal extra: pip install 'tether[temporal]'"
            raise ConfigurationError(needs) from None
        super().__init__(settings, store, agent)
        self.address = address
        self.task_queue = task_queue
        self.client: Client | None = None

    def _ours(self, setup: Mapping[str, Any]) -> bool:
        """A run is this service's when the workflows of its task queue drive it (their first save records both)."""
        from tether.drivers.temporal.workflow import ENGINE

        return setup.get("engine") == ENGINE and setup.get("task_queue") == self.task_queue

    async def start_keeping(self) -> None:
        """Connect to the Temporal server; no run is driven (or taken over) here: the workers drive them."""
        self.client = await connected(self.address)

    def _temporal(self) -> Client:
        if self.client is None:  # pragma: no cover - the lifespan connects before any request
            raise Problem(503, "the service is not connected to Temporal yet", headers={"Retry-After": "5"})
        return self.client

    async def begin(self, caller: Caller, prompt: str, conversation_id: str | None = None) -> LiveRun:
        """Record a new run and start its workflow; a conversation's turn is a 501."""
        from temporalio.service import RPCError

        from tether.drivers.temporal.client import start_run

        if conversation_id is not None:
            raise Problem(501, NO_CONVERSATIONS)
        if self.stopping:
            raise Problem(503, "the service is stopping; try again in a moment", headers={"Retry-After": "5"})
        live = LiveRun(new_id(), caller.id)
        system = self.agent.system if isinstance(self.agent.system, str) else None
        try:
            await start_run(self._temporal(), prompt, task_queue=self.task_queue, run_id=live.run_id,
                            principal=caller.principal, config=self.agent.config, system=system,
                            store=self.store)  # fmt: skip
        except StoreError as exc:
            log.error("cannot record a new run: %s", exc)
            raise Problem(503, "the service cannot record runs now; the error is logged") from None
        except RPCError as exc:  # recorded as cancelled, saying why (``start_run``)
            log.error("the Temporal server did not start run %s: %s", live.run_id, exc)
            raise Problem(503, "the service cannot start runs on Temporal now; the error is logged") from None
        return live

    async def open_conversation(self, caller: Caller) -> str:
        raise Problem(501, NO_CONVERSATIONS)

    async def decide_as(
        self, run_id: str, call_id: str, caller: Caller, *, approved: bool, reason: str | None, fingerprint: str | None
    ) -> dict[str, Any]:
        """Send ``caller``'s decision as the ``decide`` update, bound to the fingerprint; the workers go on."""
        from tether.drivers.temporal.client import decide

        await self._approver_sees(run_id, caller, "deciding on a call")
        await self._checked(run_id)
        after = await self._update(
            run_id,
            decide(
                self._temporal(),
                run_id,
                call_id,
                approved=approved,
                reason=reason,
                fingerprint=fingerprint or "",
                by=caller.username,
            ),
        )
        await self._recorded(run_id, call_id)
        return {"run_id": run_id, "call_id": call_id, "approved": approved, "status": after}

    async def reconcile_as(
        self, run_id: str, call_id: str, caller: Caller, *, executed: bool, result: Any
    ) -> dict[str, Any]:
        """Send what became of a call whose outcome is unknown as the ``reconcile`` update; the workers go on."""
        from tether.drivers.temporal.client import reconcile

        await self._approver_sees(run_id, caller, "settling a call's outcome")
        await self._checked(run_id)
        text = json.dumps(result) if executed else None
        after = await self._update(
            run_id, reconcile(self._temporal(), run_id, call_id, executed=executed, result=text, by=caller.username)
        )
        await self._recorded(run_id, call_id)
        return {"run_id": run_id, "call_id": call_id, "executed": executed, "status": after}

    async def _checked(self, run_id: str) -> None:
        """A 409 when the run's record fails its audit check. The approver read the call in the store, which
        someone who can edit the database could rewrite, while the workflow holds the call the answer is for
        (bound to its fingerprint only): a locally driven run is checked so when a decision loads it."""
        if problems := await self.io(self.store.verify, run_id):
            log.warning("%s", tampered(run_id, problems))
            raise Problem(409, f"run {run_id} fails its audit check and is not acted on")

    async def _recorded(self, run_id: str, call_id: str) -> None:
        """Wait (up to ``RECORDED_SECONDS``) for the workers to record that ``call_id`` waits no more: the store lags
        the workflow, and a caller reading the run or the inbox after the answer should not see it waiting still."""
        deadline = time.monotonic() + RECORDED_SECONDS
        while time.monotonic() < deadline:
            state = (await self.io(self.store.load, run_id, check=False)).state
            if all(call.call_id != call_id for _, call in waiting_for_a_person(state)):
                return
            await asyncio.sleep(RECORDED_POLL_SECONDS)
        log.info("run %s: the workers have not recorded the answer about call %s yet", run_id, call_id)

    async def _update(self, run_id: str, sending: Any) -> str:
        """The run's status after an update; a refusal (no such call waiting, other arguments) is a 409."""
        from temporalio.service import RPCError

        try:
            after: str = await sending
        except NotWaiting as exc:
            raise Problem(409, str(exc)) from None
        except RPCError as exc:  # no worker answers for the run now, or Temporal has no such workflow
            log.warning("cannot send an update to run %s: %s", run_id, exc)
            raise Problem(503, f"run {run_id} cannot be reached on Temporal now; try again later",
                          headers={"Retry-After": "5"}) from None  # fmt: skip
        except ConfigurationError as exc:  # the workers' answer is under a key this service lacks (codec)
            log.error("cannot read the answer of run %s's workflow: %s", run_id, exc)
            raise Problem(
                503,
                f"run {run_id}'s workflow answered under a key this service does not hold (its TETHER_TEMPORAL_KEY"
                f" differs from the workers'): GET /runs/{run_id} says whether it was recorded; the error is logged",
            ) from None
        return after

    async def cancel_as(self, run_id: str, caller: Owner) -> dict[str, Any]:
        """Cancel one of ``caller``'s runs: its workflow on Temporal, then (once it has closed) its record."""
        from temporalio.client import WorkflowFailureError
        from temporalio.service import RPCError

        stored = await self._owned(run_id, caller)
        if stored.state.status.terminal:
            raise Problem(409, f"run {run_id} is {stored.state.status.value}: there is nothing to cancel")
        handle = self._temporal().get_workflow_handle(run_id)
        try:
            await handle.cancel()
            # Closed, it saves nothing more: only then is the run recorded as cancelled here.
            await asyncio.wait_for(handle.result(), CLOSE_SECONDS)
        except WorkflowFailureError:
            pass  # cancelled, or it failed meanwhile (its reason is in the store then)
        except (RPCError, TimeoutError) as exc:
            log.warning("cannot cancel the workflow of run %s: %s", run_id, exc)
            raise Problem(503, f"run {run_id} cannot be cancelled on Temporal now; try again later",
                          headers={"Retry-After": "5"}) from None  # fmt: skip
        try:
            await self.io(record_cancelled, self.store, run_id, by=caller.username)
        except LeaseHeld:
            raise Problem(409, f"run {run_id} is being saved by a worker; try again later") from None
        except TamperedRun:
            raise Problem(409, f"run {run_id} fails its audit check and is not acted on") from None
        return await self.view(run_id, caller)


def record_cancelled(store: RunStore, run_id: str, *, by: str, reason: str = "cancelled") -> None:
    """Record the end of a run whose workflow was cancelled (and has closed): the workflow records nothing then.

    A run that ended otherwise meanwhile (it finished before the cancel reached it) is left as it is.
    """
    store.acquire(run_id)
    try:
        stored = store.load(run_id)
        if stored.state.status.terminal:
            return
        run = Run(stored.state, Toolbox([], stored.principal), executes=False)  # no call is judged or run here
        run.send(Cancel(time.time(), reason))
        finished = {"status": Status.CANCELLED.value, "output": None, "reason": reason, "by": by}
        store.checkpoint(run.state, [(RUN_FINISHED, finished)])
    finally:
        store.release(run_id)
