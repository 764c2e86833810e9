"""A served agent over A2A, through the official ``a2a-sdk`` client against a real served process.

Alice's message starts a run (a task); the refund it asks for waits for
approval, which A2A shows as ``input-required`` naming the approvals route;
Bob, an approver, decides it over the HTTP API and the task is
``completed`` with the answer as its artifact. Another caller's task is not
found; a caller without credentials is refused before the SDK sees the
request. Both protocol versions the SDK speaks are exercised: A2A 1.0
(``SendMessage``, ``SendStreamingMessage``) and 0.3 (``message/send``,
``message/stream``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path

import aiohttp
import httpx
import pytest
from serve_harness import Client, Served
from test_serve_cli import SRC

pytest.importorskip("a2a")

from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import InternalError, InvalidParamsError, TaskNotFoundError, UnsupportedOperationError

from tether.core.nesting import MAX_DEPTH
from tether.serve.settings import DEFAULT_MAX_QUEUED_RUNS_PER_USER, DEFAULT_MAX_RUNS_PER_USER
from tether.store import open_store

CARD = "/.well-known/agent-card.json"


@asynccontextmanager
async def a2a_client(base: str, who: str, *, streaming: bool, version: str = "1.0") -> AsyncIterator[object]:
    """The SDK's client for the served agent, as ``who``, speaking A2A ``version`` (the card offers 1.0 and 0.3)."""
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {who}"}, timeout=60) as http:
        factory = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming))
        card = await factory.create_from_url(base)
        served = AgentCard()
        served.CopyFrom(card._card)  # type: ignore[attr-defined]
        kept = [i for i in served.supported_interfaces if i.protocol_version == version]
        del served.supported_interfaces[:]
        served.supported_interfaces.extend(kept)
        async with factory.create(served) as client:
            yield client


def message(text: str, context_id: str = "") -> SendMessageRequest:
    sent = Message(message_id=f"m-{time.monotonic_ns()}", role=Role.ROLE_USER, parts=[Part(text=text)])
    if context_id:
        sent.context_id = context_id
    return SendMessageRequest(message=sent)


async def sent(client: object, request: SendMessageRequest) -> list[StreamResponse]:
    return [event async for event in client.send_message(request)]  # type: ignore[attr-defined]


async def task_when(client: object, task_id: str, state: int, seconds: float = 30) -> Task:
    deadline = time.monotonic() + seconds
    while True:
        task: Task = await client.get_task(GetTaskRequest(id=task_id))  # type: ignore[attr-defined]
        if task.status.state == state:
            return task
        assert time.monotonic() < deadline, f"task {task_id} still {TaskState.Name(task.status.state)}"
        await asyncio.sleep(0.05)


async def approve(api: Client, approver: str, run_id: str) -> None:
    [item] = (await api.call("GET", "/approvals", approver)).body["approvals"]
    assert (item["run_id"], item["tool"]) == (run_id, "refund")
    decision = {"approve": True, "fingerprint": item["fingerprint"]}
    reply = await api.call("POST", f"/runs/{run_id}/approvals/{item['call_id']}", approver, decision)
    assert reply.status == 200, reply.body


async def test_the_card_names_the_agent_its_skill_and_how_to_authenticate(
    served: Served, session: aiohttp.ClientSession
) -> None:
    with served.process("a2a") as (_, base):
        card = (await Client(base, session).call("GET", CARD, None)).body  # public: no credentials
    assert card["name"] == "agent"
    assert [s["id"] for s in card["skills"]] == ["agent"]
    assert card["capabilities"]["streaming"] is True
    assert {(i["url"], i["protocolVersion"]) for i in card["supportedInterfaces"]} == {
        (f"{base}/a2a", "1.0"),
        (f"{base}/a2a", "0.3"),
    }
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert "refund" not in str(card)  # the agent's tools are not advertised


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_streamed_task_waits_for_an_approver_then_completes(
    served: Served, session: aiohttp.ClientSession, version: str
) -> None:
    with served.process("a2a") as (_, base):
        api = Client(base, session)
        async with a2a_client(base, "alice", streaming=True, version=version) as alice:
            events = await sent(alice, message("Please refund order A7."))
            assert events[0].HasField("task")
            task_id, context_id = events[0].task.id, events[0].task.context_id
            states = [e.status_update.status.state for e in events if e.HasField("status_update")]
            assert states[-1] == TaskState.TASK_STATE_INPUT_REQUIRED
            assert TaskState.TASK_STATE_COMPLETED not in states
            waiting = events[-1].status_update.status.message.parts[0].text
            assert f"POST /runs/{task_id}/approvals/call_refund_" in waiting and "refund" in waiting
            assert served.refunds_made() == []

            # Subscribed to the waiting task, Alice sees it through Bob's decision to its end.
            following = alice.subscribe(SubscribeToTaskRequest(id=task_id))  # type: ignore[attr-defined]
            first = await anext(following)
            assert first.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            await approve(api, "bob:approver", task_id)
            rest = [event async for event in following]
            states = [e.status_update.status.state for e in rest if e.HasField("status_update")]
            assert states[-1] == TaskState.TASK_STATE_COMPLETED
            [answer] = [e.artifact_update.artifact for e in rest if e.HasField("artifact_update")]
            assert answer.parts[0].text == "Refunded 42 on order A7."
            done = await task_when(alice, task_id, TaskState.TASK_STATE_COMPLETED)
            assert done.context_id == context_id
            if version == "1.0":  # A2A 0.3 has no ListTasks
                listed = await alice.list_tasks(ListTasksRequest())  # type: ignore[attr-defined]
                assert [(t.id, t.context_id) for t in listed.tasks] == [(task_id, context_id)]
            assert [p.text for p in done.artifacts[0].parts] == ["Refunded 42 on order A7."]
            assert served.refunds_made() == ["A7 42"]
            with pytest.raises(UnsupportedOperationError):  # a finished task takes no input
                late = Message(message_id="m-late", role=Role.ROLE_USER, task_id=task_id, parts=[Part(text="again")])
                await sent(alice, SendMessageRequest(message=late))

        async with a2a_client(base, "carol", streaming=True, version=version) as carol:
            with pytest.raises(TaskNotFoundError):  # another caller's task: as a missing one
                await carol.get_task(GetTaskRequest(id=task_id))  # type: ignore[attr-defined]
            with pytest.raises(TaskNotFoundError):
                await carol.cancel_task(CancelTaskRequest(id=task_id))  # type: ignore[attr-defined]
            with pytest.raises(TaskNotFoundError):  # nor is its context another caller's to go on with
                await sent(carol, message("say: mine now", context_id=context_id))
            if version == "1.0":  # A2A 0.3 has no ListTasks
                listed = await carol.list_tasks(ListTasksRequest())  # type: ignore[attr-defined]
                assert task_id not in [t.id for t in listed.tasks]
                # A page token is read as no more than one this service could have given.
                huge = base64.urlsafe_b64encode(json.dumps([10**400, task_id]).encode()).decode()
                with pytest.raises(InvalidParamsError, match="not a cursor this service gave"):
                    await carol.list_tasks(ListTasksRequest(page_token=huge))  # type: ignore[attr-defined]
        # The task is the run: the HTTP API shows the same one.
        assert (await api.call("GET", f"/runs/{task_id}", "alice")).body["status"] == "completed"


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_sent_message_answers_with_the_task_and_a_context_is_a_conversation(
    served: Served, session: aiohttp.ClientSession, version: str
) -> None:
    with served.process("a2a") as (_, base):
        async with a2a_client(base, "alice", streaming=False, version=version) as alice:
            [first] = await sent(alice, message("say: hello"))
            assert first.task.status.state == TaskState.TASK_STATE_COMPLETED
            assert first.task.artifacts[0].parts[0].text == "You said hello"
            [second] = await sent(alice, message("say: again", context_id=first.task.context_id))
            assert second.task.context_id == first.task.context_id and second.task.id != first.task.id
            assert second.task.artifacts[0].parts[0].text == "You said again"

            [waiting] = await sent(alice, message("Please refund order A7."))  # blocks until it settles
            assert waiting.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            await approve(Client(base, session), "bob:approver", waiting.task.id)
            done = await task_when(alice, waiting.task.id, TaskState.TASK_STATE_COMPLETED)
            assert done.artifacts[0].parts[0].text == "Refunded 42 on order A7."

            [dropped] = await sent(alice, message("Please refund order A7."))
            cancelled = await alice.cancel_task(CancelTaskRequest(id=dropped.task.id))  # type: ignore[attr-defined]
            assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
            assert cancelled.status.message.parts[0].text.startswith("the run ended cancelled: ")
            assert not cancelled.artifacts

        transcript = await Client(base, session).call("GET", f"/conversations/{first.task.context_id}", "alice")
        assert [t["run_id"] for t in transcript.body["turns"]] == [first.task.id, second.task.id]


async def test_a_message_in_the_context_of_a_run_started_outside_a_conversation_says_how_to_go_on(
    served: Served, session: aiohttp.ClientSession
) -> None:
    """A run started with POST /runs is a task whose contextId is its own id, and no conversation follows it:
    a message sent in that context is refused saying so, to its owner only (to another caller it is just a
    context that does not exist)."""
    with served.process("a2a") as (_, base):
        api = Client(base, session)
        run_id = await api.start("alice", "say: hello")
        await api.settled("alice", run_id)
        async with a2a_client(base, "alice", streaming=False) as alice:
            task = await task_when(alice, run_id, TaskState.TASK_STATE_COMPLETED)
            assert task.context_id == run_id
            with pytest.raises(TaskNotFoundError) as owners:
                await sent(alice, message("say: again", context_id=run_id))
        async with a2a_client(base, "carol", streaming=False) as carol:
            with pytest.raises(TaskNotFoundError) as others:
                await sent(carol, message("say: again", context_id=run_id))
    assert "started outside a conversation" in str(owners.value), owners.value
    assert "without a contextId" in str(owners.value)
    assert "outside a conversation" not in str(others.value) and f"no context {run_id}" in str(others.value)


async def test_a_caller_without_credentials_or_a_json_body_is_refused(served: Served) -> None:
    with served.process("a2a") as (_, base):
        said = {"messageId": "m1", "role": "user", "parts": [{"kind": "text", "text": "say: hi"}]}
        request = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": said}}
        async with httpx.AsyncClient() as http:
            refused = await http.post(f"{base}/a2a", json=request)
            assert refused.status_code == 401
            assert refused.headers["content-type"].startswith("application/problem+json")
            accepted = await http.post(f"{base}/a2a", json=request, headers={"Authorization": "Bearer alice"})
            # A body a web page can post without a CORS preflight is refused before it is read.
            plain = {"Authorization": "Bearer alice", "Content-Type": "text/plain"}
            posted = await http.post(f"{base}/a2a", content=json.dumps(request), headers=plain)
            assert posted.status_code == 415, posted.text
    assert accepted.status_code == 200
    assert accepted.json()["result"]["status"]["state"] == "completed"  # A2A 0.3's own method name, answered
    assert served.refunds_made() == []


async def test_a_listing_with_a_page_size_below_zero_or_a_forged_page_token_is_invalid_params(
    served: Served,
) -> None:
    """ListTasks' page size is an int32 the caller sets, its page token base64 JSON the caller can write: a
    negative size and a token naming a run id no store can look up are the caller's error, not an internal one."""
    forged = base64.urlsafe_b64encode(b'[1796221203.25, "\\ud800"]').decode()
    with served.process("a2a") as (_, base):
        async with a2a_client(base, "alice", streaming=False) as alice:
            [done] = await sent(alice, message("say: hi"))
            with pytest.raises(InvalidParamsError, match="page size"):
                await alice.list_tasks(ListTasksRequest(page_size=-1))  # type: ignore[attr-defined]
            with pytest.raises(InvalidParamsError, match="not a cursor this service gave"):
                await alice.list_tasks(ListTasksRequest(page_token=forged))  # type: ignore[attr-defined]
            listed = await alice.list_tasks(ListTasksRequest(page_size=1))  # type: ignore[attr-defined]
    assert [t.id for t in listed.tasks] == [done.task.id]


async def test_listing_one_contexts_tasks_fills_its_pages_from_that_context(served: Served) -> None:
    """The contextId filter was applied to a page of all the caller's runs: the context's tasks, older than a
    page of other runs, came back after pages that were empty but for a next-page token."""
    with served.process("a2a") as (_, base):
        async with a2a_client(base, "alice", streaming=False) as alice:
            [first] = await sent(alice, message("say: one"))
            context = first.task.context_id
            [second] = await sent(alice, message("say: two", context_id=context))
            others = [await sent(alice, message(f"say: {n}")) for n in range(3)]  # newer, each its own context
            page = await alice.list_tasks(ListTasksRequest(context_id=context, page_size=1))  # type: ignore[attr-defined]
            rest = await alice.list_tasks(  # type: ignore[attr-defined]
                ListTasksRequest(context_id=context, page_size=1, page_token=page.next_page_token)
            )
            alone = others[0][0].task
            own = await alice.list_tasks(ListTasksRequest(context_id=alone.context_id))  # type: ignore[attr-defined]
    assert [t.id for t in page.tasks] == [second.task.id] and page.next_page_token
    assert [t.id for t in rest.tasks] == [first.task.id]
    assert [t.context_id for t in [*page.tasks, *rest.tasks]] == [context, context]
    assert [t.id for t in own.tasks] == [alone.id]


async def test_a_message_refused_for_too_many_runs_leaves_no_conversation_behind(
    served: Served, session: aiohttp.ClientSession
) -> None:
    """A message without a contextId starts a conversation: one the service cannot run a turn of (the caller has
    every run going and waiting it may) is never recorded."""
    with served.process("a2a") as (_, base):
        api = Client(base, session)
        for _ in range(DEFAULT_MAX_RUNS_PER_USER + DEFAULT_MAX_QUEUED_RUNS_PER_USER):
            await api.start("alice", "take your time")  # the model answers after a minute
        async with a2a_client(base, "alice", streaming=False) as alice:
            with pytest.raises(InternalError, match="as many runs going and waiting as you may"):
                await sent(alice, message("say: one too many"))
    with closing(open_store(served.db)) as store:
        assert store.list_conversations("alice") == []


async def test_a_task_outlives_the_process_that_started_it(served: Served, session: aiohttp.ClientSession) -> None:
    with served.process("a2a") as (process, base):
        async with a2a_client(base, "alice", streaming=False) as alice:
            [waiting] = await sent(alice, message("Please refund order A7."))
        assert waiting.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        process.kill()  # SIGKILL: nothing is handed on
        process.wait(timeout=30)
    with served.process("a2a") as (_, base):
        await approve(Client(base, session), "bob:approver", waiting.task.id)
        async with a2a_client(base, "alice", streaming=False) as alice:
            done = await task_when(alice, waiting.task.id, TaskState.TASK_STATE_COMPLETED)
    assert done.context_id == waiting.task.context_id
    assert done.artifacts[0].parts[0].text == "Refunded 42 on order A7."
    assert served.refunds_made() == ["A7 42"]


def test_every_status_of_a_run_is_a_task_state() -> None:
    from tether.core.machine import Status
    from tether.serve.a2a import state_of

    states = {status.value: TaskState.Name(state_of(status.value)) for status in Status}
    assert states == {
        "ready": "TASK_STATE_SUBMITTED",
        "awaiting_model": "TASK_STATE_WORKING",
        "awaiting_tools": "TASK_STATE_WORKING",
        "awaiting_approval": "TASK_STATE_INPUT_REQUIRED",
        "awaiting_reconciliation": "TASK_STATE_INPUT_REQUIRED",
        "completed": "TASK_STATE_COMPLETED",
        "cancelled": "TASK_STATE_CANCELED",
        "content_filtered": "TASK_STATE_REJECTED",
        **{s: "TASK_STATE_FAILED" for s in ("max_steps", "budget_exhausted", "truncated", "protocol_error",
                                            "loop_detected", "repair_exhausted", "model_error")},
    }  # fmt: skip


def test_without_the_a2a_extra_the_flag_is_a_configuration_error(served: Served, tmp_path: Path) -> None:
    missing = tmp_path / "site"
    (missing / "a2a").mkdir(parents=True)
    (missing / "a2a" / "__init__.py").write_text("raise ModuleNotFoundError('No module named a2a', name='a2a')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(missing), str(SRC)]), "OPENAI_API_KEY": "sk-x",
           "OPENAI_BASE_URL": served.model.base_url}  # fmt: skip
    command = [sys.executable, "-m", "tether", "serve", f"{served.agent_py}:agent", "--a2a", "--db", str(served.db)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 3, done.stderr
    assert "--a2a needs the a2a extra: pip install 'tether[a2a]' (a2a is missing)" in done.stderr
    assert "Traceback" not in done.stderr


async def test_a_request_the_sdk_cannot_read_leaves_none_of_its_text_in_the_log(served: Served) -> None:
    """The SDK logs the parser's error, which quotes what it refused: the service keeps where, not what."""
    secret = "Tr0ub4dor&3-horse"
    said = {"role": "user", "parts": [{"kind": "text", "text": f"my password: {secret}"}]}  # no messageId
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": said}}  # A2A 0.3
    with served.process("a2a") as (process, base):
        async with httpx.AsyncClient() as http:
            headers = {"Authorization": "Bearer alice", "Content-Type": "application/json"}
            refused = await http.post(f"{base}/a2a", json=body, headers=headers)
            # A2A 1.0's parser names the value it could not read in the error's data, which the SDK logs.
            listing = {"jsonrpc": "2.0", "id": 2, "method": "ListTasks", "params": {"pageSize": secret}}
            unread = await http.post(f"{base}/a2a", json=listing, headers={**headers, "A2A-Version": "1.0"})
        assert refused.status_code == 200 and "error" in refused.json(), refused.text
        assert unread.json()["error"]["code"] == -32602, unread.text  # the caller is told (its own text)
        process.terminate()
        process.wait(timeout=30)
        assert process.stderr is not None
        log = process.stderr.read().decode()
    assert "Failed to" in log and "ValidationError" in log  # logged, as a refusal
    assert "Request Error: Code=-32602" in log
    assert secret not in log


async def test_an_a2a_stream_past_the_callers_event_streams_is_refused_before_its_run_starts(
    served: Served, session: aiohttp.ClientSession
) -> None:
    """A2A streams count with the caller's server-sent event streams; a message refused starts no run and
    makes no conversation, and one more may stream once the other stream is closed."""
    with served.process("a2a", env={"TETHER_MAX_EVENT_STREAMS_PER_USER": "1"}) as (_, base):
        api = Client(base, session)
        slow = await api.start("alice", "take your time")
        url, auth = f"{base}/runs/{slow}/events", {"Authorization": "Bearer alice"}
        async with session.get(url, headers=auth) as held:
            assert held.status == 200
            async with a2a_client(base, "alice", streaming=True) as alice:
                with pytest.raises(InternalError, match="you have 1 event streams open"):
                    await sent(alice, message("say: one stream too many"))
                with pytest.raises(InternalError, match="you have 1 event streams open"):
                    [_ async for _ in alice.subscribe(SubscribeToTaskRequest(id=slow))]  # type: ignore[attr-defined]
            with closing(open_store(served.db)) as store:
                assert (len(store.list_runs()), store.list_conversations("alice")) == (1, [])
        async with a2a_client(base, "alice", streaming=True) as alice:
            events = await sent(alice, message("say: now there is room"))
        assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_a_new_context_past_the_callers_empty_conversations_is_refused(
    served: Served, session: aiohttp.ClientSession
) -> None:
    with served.process("a2a", env={"TETHER_MAX_EMPTY_CONVERSATIONS_PER_USER": "1"}) as (_, base):
        api = Client(base, session)
        assert (await api.call("POST", "/conversations", "alice")).status == 201  # empty: no turn yet
        async with a2a_client(base, "alice", streaming=False) as alice:
            with pytest.raises(InternalError, match="you have 1 conversations with no turn yet"):
                await sent(alice, message("say: hi"))
        async with a2a_client(base, "bob", streaming=False) as bob:
            [answered] = await sent(bob, message("say: hi"))
        assert answered.task.status.state == TaskState.TASK_STATE_COMPLETED
    with closing(open_store(served.db)) as store:
        assert [len(store.list_conversations(who)) for who in ("alice", "bob")] == [1, 1]
        assert [r.principal for r in store.list_runs()] == ["bob"]


def _send(version: str, request_id: object = 7, text: str = "say: hi", **fields: object) -> str:
    """A message sent with A2A ``version``'s method (``message/send``, ``SendMessage``) as JSON text: a lone
    surrogate in it is the escape ``\\ud800``, as ``json.dumps`` writes one."""
    part = {"kind": "text", "text": text} if version == "0.3" else {"text": text}
    said = {"messageId": f"m-{time.monotonic_ns()}", "role": "user" if version == "0.3" else "ROLE_USER",
            "parts": [part], **fields}  # fmt: skip
    method = "message/send" if version == "0.3" else "SendMessage"
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": {"message": said}})


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_message_tether_cannot_read_as_json_text_is_refused_with_a_precise_code_and_records_nothing(
    served: Served, version: str
) -> None:
    """A body not UTF-8 or nested past tether's limit is a parse error (its id unread: null); a key twice in one
    object is invalid params in ``params`` (the id echoed) and an invalid request elsewhere; a lone UTF-16
    surrogate, which no store can keep, is invalid params in a part's text, a contextId or a metadata key (the
    request's id echoed) and an invalid request in the id. No traceback, no run, no conversation, and the next
    message is answered."""
    lone, deep = "\ud800", '"@"'
    just_past = MAX_DEPTH - 3  # four levels of envelope around the metadata: the body is MAX_DEPTH + 1 deep
    unreadable = {
        "text": (_send(version, text=f"say: {lone}"), (-32602, 7)),
        "contextId": (_send(version, request_id="r-1", contextId=lone), (-32602, "r-1")),
        "metadata key": (_send(version, request_id=8, metadata={lone: 1}), (-32602, 8)),
        "id": (_send(version, request_id=lone), (-32600, None)),  # an id no answer can echo
        "not UTF-8": (_send(version, text="say: @").replace("@", "\udcff"), (-32700, None)),
        "just past the limit": (_send(version, metadata={"k": "@"}).replace(deep, "[" * just_past + "]" * just_past),
                                (-32700, None)),
        "far past it": (_send(version, metadata={"k": "@"}).replace(deep, "[" * 100_000 + "]" * 100_000),
                        (-32700, None)),
        # A key twice in one object is refused as in a model's arguments (which text is the prompt?), not last-wins.
        "a key twice in a part": (_send(version, request_id=9, text="say: a").replace(
            '"say: a"', '"say: a", "text": "say: b"'), (-32602, 9)),
        "a key twice in the envelope": (_send(version, request_id=10).replace('"id": 10', '"id": 10, "id": 11'),
                                        (-32600, None)),
    }  # fmt: skip
    headers = {"Authorization": "Bearer alice", "Content-Type": "application/json", "A2A-Version": version}
    with served.process("a2a") as (process, base):
        async with httpx.AsyncClient(timeout=60) as http:
            answers: dict[str, object] = {}
            for case, (body, _) in unreadable.items():
                sent = body.encode("utf-8", "surrogateescape")  # "not UTF-8": the byte 0xff
                try:
                    answers[case] = (await http.post(f"{base}/a2a", content=sent, headers=headers)).json()
                except (httpx.HTTPError, ValueError) as exc:  # the old answer to some: no answer at all
                    answers[case] = repr(exc)
            well_formed = await http.post(f"{base}/a2a", content=_send(version).encode(), headers=headers)
        process.terminate()
        process.wait(timeout=30)
        assert process.stderr is not None
        log = process.stderr.read().decode()
    refused = {case: (a.get("error", {}).get("code"), a.get("id")) if isinstance(a, dict) else a
               for case, a in answers.items()}  # fmt: skip
    assert refused == {case: answer for case, (_, answer) in unreadable.items()}
    answered = well_formed.json()["result"]
    task = answered["task"] if version == "1.0" else answered  # A2A 1.0 names what a message was answered with
    assert task["status"]["state"] in ("completed", "TASK_STATE_COMPLETED"), well_formed.text
    assert "Traceback" not in log and 'File "' not in log, log
    with closing(sqlite3.connect(served.db)) as db:
        counted = [db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in ("runs", "conversations")]
    assert counted == [1, 1]  # the well-formed message's run and its conversation
