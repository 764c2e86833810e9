"""``TETHER_TEMPORAL_KEY``: what the Temporal server stores of a run is ciphertext; a worker without the key stops.

The runs go through the CLI's processes (``tether worker``, ``tether run``,
``tether approve``); the history is read back with a plain SDK client, as
anyone who can read the server would.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import Message as Proto
from temporal_helpers import SRC, child_env, spawn_worker, stop, transcript
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowFailureError
from temporalio.converter import DataConverter

from tether.core.errors import ConfigurationError, KeyRefused
from tether.drivers.temporal.client import connect, start_run, status
from tether.drivers.temporal.codec import ENCODING, KEY_VARIABLE, data_converter, key_id, parse_keys, payload_codec
from tether.drivers.temporal.devserver import DevServer
from tether.drivers.temporal.worker import make_worker
from tether.drivers.temporal.workflow import failure_reason
from tether.models.openai_chat import OpenAIChatModel
from tether.store import SQLiteStore
from tether.testing import FakeServer
from tether.testing.fake_server import ReplySpec, text, tool_calls
from tether.tools import tool
from tether.tools.context import Principal

ANN = Principal("ann", frozenset({"*"}))


@tool
def transfer(iban: str, amount: int, api_token: str) -> str:
    """Send money (a side effect): never reached here, the principal's resolver fails first."""
    raise AssertionError("the transfer ran")


TOOLS = [transfer]
KEY = base64.b64encode(bytes(range(32))).decode()
OTHER_KEY = base64.b64encode(bytes(range(32, 64))).decode()
PROMPT_MARKER = "PROMPT-MARKER-7f3a9c"
TOKEN = "tok-SECRET-0123456789abcdef"
IBAN = "DE89370400440532013000"
REASON_MARKER = "REASON-MARKER-51d2"
ANSWER = "Paid 120 euros to the landlord."


def bank(request: dict[str, Any]) -> ReplySpec:
    """A transfer whose arguments are secrets, then the answer."""
    if request["messages"][-1]["role"] == "user":
        return tool_calls([("c1", "transfer", json.dumps({"iban": IBAN, "amount": 120, "api_token": TOKEN}))])
    return text(ANSWER)


def tether(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True, env=env, timeout=60)


def environment(tmp_path: Path, key: str | None) -> dict[str, str]:
    env = child_env(tmp_path / "orders.jsonl")
    env.pop(KEY_VARIABLE, None)
    return env if key is None else env | {KEY_VARIABLE: key}


def payloads(message: Proto) -> Iterator[Payload]:
    """Every payload in a history (or any message of Temporal's API), however deep."""
    if isinstance(message, Payload):
        yield message
        return
    for _, value in message.ListFields():
        items = value.values() if isinstance(value, Mapping) else value if isinstance(value, Sequence) else [value]
        for item in items:
            if isinstance(item, Proto):
                yield from payloads(item)


def sdk_own(history: History) -> list[Payload]:
    """The payloads the SDK writes for the server, never through the data converter: its markers' details but the
    result, and the search attributes it upserts (the ``TemporalChangeVersion`` of a patch)."""
    found = [p for e in history.events for name, details in e.marker_recorded_event_attributes.details.items()
             if name != "result" for p in details.payloads]  # fmt: skip
    for event in history.events:
        found += event.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields.values()
    assert found
    return found


async def history_of(address: str, run_id: str) -> History:
    """The run's history as the server keeps it, read by a client without tether's codec."""
    plain = await Client.connect(address)
    return History(events=(await plain.get_workflow_handle(run_id).fetch_history()).events)


@pytest.mark.parametrize("key", [KEY, None], ids=["key", "no-key"])
async def test_with_the_key_the_history_holds_no_prompt_no_argument_no_reason_and_no_answer(
    temporal_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str | None
) -> None:
    address, queue = temporal_server.address, f"q-{uuid.uuid4().hex[:8]}"
    env = environment(tmp_path, key)
    with FakeServer(script=bank) as server:
        worker = spawn_worker(address, queue, server.base_url, env, "--tools", "bank_tools:TOOLS")
        try:
            started = tether(env, "run", f"Pay the rent. {PROMPT_MARKER}", "--engine", "temporal",
                             "--temporal", address, "--task-queue", queue, "--json")  # fmt: skip
            assert started.returncode == 20, started.stdout + started.stderr  # awaiting approval
            run_id = json.loads(started.stdout)["run_id"]
            approved = tether(env, "approve", run_id, "c1", "--temporal", address, "--reason", REASON_MARKER)
            assert approved.returncode == 0, approved.stderr
            if key is not None:
                monkeypatch.setenv(KEY_VARIABLE, key)
            client = await connect(address)  # tether's client: with the key, it reads what the workers wrote
            result = await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 30)
        finally:
            stop(worker)
    assert (result["status"], result["output"]) == ("completed", ANSWER)

    history = await history_of(address, run_id)
    stored = b"".join(event.SerializeToString() for event in history.events)
    found = list(payloads(history))
    assert len(found) > 10  # the start, each activity's input and result, the update, the queries' answers...
    secrets = [PROMPT_MARKER, TOKEN, IBAN, REASON_MARKER, ANSWER]
    if key is None:  # as before: every one of them in plain text
        assert [s for s in secrets if s.encode() in stored] == secrets
    else:
        assert [s for s in secrets if s.encode() in stored] == []
        # Plain only where the SDK writes for the server itself: its markers' own data (a patch's id, a local
        # activity's name and timing; their "result" is encrypted) and the search attribute naming the patches.
        encrypted = [p for p in found if p.metadata["encoding"] == ENCODING]
        plain = [p.SerializeToString() for p in found if p.metadata["encoding"] != ENCODING]
        assert sorted(plain) == sorted(p.SerializeToString() for p in sdk_own(history))
        assert {p.metadata["encryption-key-id"] for p in encrypted} == {key_id(base64.b64decode(KEY)).encode()}

    # The run store holds the run in plain text, as ever: the transcript, the effect, an intact audit chain.
    messages = transcript(Path(env["SHOP_ORDERS"]), run_id)
    assert PROMPT_MARKER in messages[0]["content"]
    assert json.loads(messages[1]["tool_calls"][0]["arguments"])["iban"] == IBAN
    assert json.loads(messages[2]["content"]) == {"ok": True, "result": {"transfer": f"{run_id}:c1"}}
    assert messages[-1] == {"role": "assistant", "content": ANSWER}
    assert len(Path(env["SHOP_ORDERS"]).read_text().splitlines()) == 1
    verified = tether(env, "runs", "verify", run_id)
    assert verified.returncode == 0, verified.stdout + verified.stderr


NEEDED, HELD = key_id(base64.b64decode(KEY)), key_id(base64.b64decode(OTHER_KEY))
SAME_KEY = f"give every client and worker of the task queue the same {KEY_VARIABLE}"


HAS_NONE = f"a Temporal payload is encrypted under key {NEEDED} and this process has no {KEY_VARIABLE}: {SAME_KEY}"
HAS_OTHER = (
    f"a Temporal payload is encrypted under key {NEEDED}, which this process's {KEY_VARIABLE} does not hold"
    f" (it holds {HELD}): the keys differ; {SAME_KEY}"
)


@pytest.mark.parametrize(
    ("worker_key", "says"), [(OTHER_KEY, HAS_OTHER), (None, HAS_NONE)], ids=["other-key", "no-key"]
)
async def test_a_worker_without_the_clients_key_runs_nothing_and_says_why(
    temporal_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, worker_key: str | None, says: str
) -> None:
    """The worker's workflow task fails on the run's first payload, naming the key it lacks; Temporal retries it, so
    the run waits (no model request, no call) until a worker holding the key takes it."""
    address, queue = temporal_server.address, f"q-{uuid.uuid4().hex[:8]}"
    with FakeServer(script=bank) as server:
        worker = spawn_worker(address, queue, server.base_url, environment(tmp_path, worker_key),
                              "--tools", "bank_tools:TOOLS")  # fmt: skip
        try:
            started = tether(environment(tmp_path, KEY), "run", f"Pay the rent. {PROMPT_MARKER}", "--engine",
                             "temporal", "--temporal", address, "--task-queue", queue, "--no-wait")  # fmt: skip
            assert started.returncode == 0, started.stderr
            run_id = started.stdout.strip()
            deadline = time.monotonic() + 30
            while not (failed := [e for e in (await history_of(address, run_id)).events
                                  if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]):  # fmt: skip
                assert time.monotonic() < deadline, "the worker's workflow task never failed"
                await asyncio.sleep(0.1)
            failure = failed[0].workflow_task_failed_event_attributes.failure
            assert (failure.application_failure_info.type, failure.message) == ("KeyRefused", says)
            kinds = {e.event_type for e in (await history_of(address, run_id)).events}
            assert EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in kinds
            assert server.requests == []  # the model was never asked
            # `tether run`, waiting for a run no worker can read, says why (it said only that a query failed).
            waiting = subprocess.Popen(
                [sys.executable, "-m", "tether", "run", "Pay the rent.", "--engine", "temporal", "--temporal",
                 address, "--task-queue", queue],
                stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=environment(tmp_path, KEY),
            )  # fmt: skip
            try:
                assert waiting.stderr is not None
                line = await asyncio.wait_for(asyncio.to_thread(waiting.stderr.readline), 60)
            finally:
                waiting.kill()
                waiting.wait()
            assert line.startswith("run ") and line.endswith(f": no worker can read it: {says}; waiting\n"), line
        finally:
            worker.send_signal(signal.SIGTERM)
            _, logged = worker.communicate(timeout=30)
            stop(worker)
    assert says in logged

    if worker_key is None:
        return  # the other case shows the run going on once a worker holds the key (~9 s: Temporal's backoff)
    # A worker holding the key takes the run over from where it waited: nothing was lost.
    monkeypatch.setenv(KEY_VARIABLE, KEY)
    with FakeServer(script=bank) as server:
        worker = spawn_worker(
            address, queue, server.base_url, environment(tmp_path, KEY), "--tools", "bank_tools:TOOLS"
        )
        try:
            client = await connect(address)
            deadline = time.monotonic() + 60
            # Until the new worker's first task, a query fails as the last task did: ``status`` asks again.
            while (await status(client, run_id, patience=60))["status"] != "awaiting_approval":
                assert time.monotonic() < deadline, "the run never reached its approval"
                await asyncio.sleep(0.2)
        finally:
            stop(worker)


def directory_down(principal: Principal) -> Principal | None:
    raise RuntimeError(f"the directory is down: {principal.id} {TOKEN}")


@pytest.mark.parametrize("key", [KEY, None], ids=["key", "no-key"])
async def test_with_the_key_a_failures_message_is_encrypted_too(
    temporal_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str | None
) -> None:
    """A resolver's exception quoting what it holds (a token), the local activity's failure and the run's reason
    that carries it: with the key, the history keeps none of it readable; tether's client still reads why."""
    if key is not None:
        monkeypatch.setenv(KEY_VARIABLE, key)
    else:
        monkeypatch.delenv(KEY_VARIABLE, raising=False)
    store = SQLiteStore(tmp_path / "runs.db")
    run_id, queue = uuid.uuid4().hex, f"q-{uuid.uuid4().hex[:8]}"
    client = await connect(temporal_server.address)
    async with FakeServer(script=bank) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="k")
        async with make_worker(client, queue, model, TOOLS, store=store, resolve_principal=directory_down):
            handle = await start_run(client, PROMPT_MARKER, task_queue=queue, run_id=run_id, principal=ANN)
            with pytest.raises(WorkflowFailureError) as failed:
                await asyncio.wait_for(handle.result(), 60)
        await model.aclose()
    said = f"the directory is down: ann {TOKEN}"
    assert failure_reason(failed.value) == said  # read with the key, as tether's processes read it
    assert store.load(run_id).state.reason == f"the workflow failed: {said}"
    store.close()
    history = await history_of(temporal_server.address, run_id)
    failures = [e for e in history.events if e.HasField("workflow_execution_failed_event_attributes")]
    assert len(failures) == 1
    stored = b"".join(event.SerializeToString() for event in history.events)
    if key is None:  # as before: the token in the failures' messages
        assert TOKEN.encode() in stored
    else:
        assert TOKEN.encode() not in stored and b"directory is down" not in stored
        assert failures[0].workflow_execution_failed_event_attributes.failure.message == "Encoded failure"


KEYS = {
    "not-base64": "hunter2-IS-NOT*A-KEY",
    "too-short": base64.b64encode(b"SIXTEEN-BYTES-OK").decode(),
    "second-bad": f"{KEY},hunter2-IS-NOT*A-KEY",
}
SAYS = {
    "not-base64": "its key is not base64",
    "too-short": "its key decodes to 16 bytes",
    "second-bad": "its key #2 is not base64",
}


@pytest.mark.parametrize(
    ("command", "which"),
    [("run", "not-base64"), ("worker", "too-short"), ("approve", "second-bad"), ("serve", "not-base64")],
)
def test_a_malformed_key_is_a_configuration_error_that_does_not_echo_it(
    tmp_path: Path, command: str, which: str
) -> None:
    env = environment(tmp_path, KEYS[which])
    nowhere = ["--temporal", "127.0.0.1:1"]  # never reached: the key is read first
    agent_py = tmp_path / "agent.py"
    agent_py.write_text("from tether import Agent, ScriptedModel\nagent = Agent(ScriptedModel([]), [])\n")
    model = ["--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--api-key", "k"]
    argv = {
        "run": ["run", "hi", "--engine", "temporal", *nowhere],
        "worker": ["worker", *nowhere, "--tools", "bank_tools:TOOLS", *model],
        "approve": ["approve", "run-1", "c1", *nowhere],
        "serve": ["serve", f"{agent_py}:agent", "--engine", "temporal", *nowhere, "--port", "1"],
    }[command]
    done = tether(env, *argv)
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"{KEY_VARIABLE}: {SAYS[which]}; each key is 32 random bytes in base64" in done.stderr
    assert "Traceback" not in done.stderr
    for part in KEYS[which].split(","):
        assert part not in done.stdout + done.stderr


async def test_the_codec_alone_encrypts_each_payload_afresh_and_decrypts_under_an_old_key(temporal_sdk: None) -> None:
    old = data_converter({KEY_VARIABLE: OTHER_KEY})
    rotated = data_converter({KEY_VARIABLE: f"{KEY},{OTHER_KEY}"})  # the first encrypts, both decrypt
    first, second = await old.encode(["the same", "the same"])
    assert first.data != second.data  # a fresh nonce each
    assert await rotated.decode([first, second]) == ["the same", "the same"]
    (new,) = await rotated.encode(["new"])
    assert new.metadata["encryption-key-id"] == key_id(base64.b64decode(KEY)).encode()
    with pytest.raises(ConfigurationError, match="the keys differ"):
        await old.decode([new])
    plain = await data_converter({}).encode(["before the key"])  # a run from before the key was set
    with pytest.raises(KeyRefused, match="is not encrypted"):
        await rotated.decode(plain)
    assert await data_converter({KEY_VARIABLE: f"{KEY},{OTHER_KEY},plaintext"}).decode(plain) == ["before the key"]
    altered = Payload()
    altered.CopyFrom(new)
    altered.data = new.data[:-1] + bytes([new.data[-1] ^ 1])
    with pytest.raises(ConfigurationError, match="fails its authentication"):
        await rotated.decode([altered])


def not_encrypted(encoding: str) -> str:
    return (
        f"a Temporal payload is not encrypted ({encoding}) and this process has a {KEY_VARIABLE}, so it reads only what"
        " the key encrypted: the payload was written by a client or worker without the key (or by someone without"
        f" it), or before the key was set; {SAME_KEY}, and to read runs started before the key was set, add"
        " `plaintext` to it (KEY,plaintext)"
    )


(SDK_NONE,) = DataConverter.default.payload_converter.to_payloads([None])


@pytest.mark.parametrize(
    ("payload", "encoding"),
    [
        (Payload(metadata={"encoding": b"json/plain"}, data=b'{"approved": true}'), "encoding json/plain"),
        (SDK_NONE, "encoding binary/null"),
        (Payload(data=b"no metadata at all"), "no encoding"),
        (Payload(metadata={"encoding": b"\x1b[2J" + b"x" * 60}), "an unreadable encoding"),
    ],
    ids=["json", "sdk-none", "no-encoding", "unreadable-encoding"],
)
async def test_with_the_key_a_payload_written_without_it_is_refused_saying_why(
    temporal_sdk: None, payload: Payload, encoding: str
) -> None:
    """Whoever wrote it lacks the key: a decision, a signal or a start anyone reaching the server could send. The
    SDK's own None is no exception: with a key it is encrypted like any payload."""
    (encrypted,) = await data_converter({KEY_VARIABLE: KEY}).encode(["a key holder's"])
    with pytest.raises(KeyRefused) as refused:
        await payload_codec({KEY_VARIABLE: KEY}).decode([encrypted, payload])
    assert str(refused.value) == not_encrypted(encoding)
    # `plaintext` reads it as it is, and so does a process without a key, as ever.
    read = await payload_codec({KEY_VARIABLE: f"{KEY},plaintext"}).decode([encrypted, payload])
    assert read[1] == payload and read[0].metadata["encoding"] == b"json/plain"
    assert await payload_codec({}).decode([payload]) == [payload]


FIRST = (
    f"{KEY_VARIABLE}: its first entry is `plaintext`, not a key: the first entry is the key that encrypts;"
    " `plaintext` goes after the keys (KEY,plaintext)"
)
ONLY_KEYS = "each key is 32 random bytes in base64 (`openssl rand -base64 32`), several separated by commas"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("plaintext", FIRST),
        (f"plaintext,{KEY}", FIRST),
        (f"{KEY},plaintxt", f"{KEY_VARIABLE}: its key #2 decodes to 6 bytes; {ONLY_KEYS}, then optionally `plaintext`"),
    ],
    ids=["alone", "first", "misspelt"],
)
def test_plaintext_is_an_entry_after_the_keys(text: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        payload_codec({KEY_VARIABLE: text})
    assert str(refused.value) == says
    keys = [base64.b64decode(KEY), base64.b64decode(OTHER_KEY)]
    assert parse_keys(f"{KEY}, plaintext ,{OTHER_KEY}") == (keys, True)
    assert parse_keys(f"{KEY},{OTHER_KEY}") == (keys, False)


def test_without_the_key_no_cryptography_is_imported() -> None:
    probe = (
        "import sys\n"
        "from tether.drivers.temporal.codec import data_converter\n"
        "data_converter({})\n"
        "print('cryptography' in sys.modules)\n"
        f"data_converter({{'{KEY_VARIABLE}': '{KEY}'}})\n"
        "print('cryptography' in sys.modules)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(SRC))
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.split() == ["False", "True"], done.stderr
