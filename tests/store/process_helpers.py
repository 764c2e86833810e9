"""Real processes for the durability tests: the ``tether`` CLI, the crash harness, the store read back.

Each test gets a ``Bench``: a SQLite run store and an effects file in its
tmp_path, and a FakeServer running in a thread of the test process that the
subprocesses reach over loopback. OPENAI_*/TETHER_*/CRASH_* variables of the
developer never reach the children.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.store import RunStore, SQLiteStore, StoredEvent
from tether.testing.fake_server import FakeServer

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "crash_harness.py"
TIMEOUT = 90.0
SIGKILLED = -9
CALL = "call_1"
PROMPT = "Close ticket T-1, please."


@dataclass(frozen=True)
class Done:
    code: int
    out: str
    err: str


@dataclass
class Bench:
    db: Path
    effects: Path
    server: FakeServer

    # --- processes -----------------------------------------------------------------

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TETHER_", "CRASH_"))}
        env["PYTHONUTF8"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
        env["CRASH_EFFECTS"] = str(self.effects)
        env.update(extra)
        return env

    def command(self, *argv: str) -> list[str]:
        return [sys.executable, "-m", "tether", *argv]

    def run_argv(self, prompt: str = PROMPT) -> list[str]:
        return [
            "run", prompt, "--tools", "crash_tools", "--db", str(self.db),
            "--base-url", self.server.base_url, "--model", "fake", "--api-key", "x",
        ]  # fmt: skip

    def _call(self, argv: Sequence[str], env: dict[str, str]) -> Done:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, encoding="utf-8", env=env, timeout=TIMEOUT, check=False
        )
        return Done(done.returncode, done.stdout, done.stderr)

    def tether(self, *argv: str, **env: str) -> Done:
        done = self._call(self.command(*argv), self.env(**env))
        assert "Traceback" not in done.out + done.err, done
        return done

    def crash(self, at: str, prompt: str = PROMPT) -> Done:
        """``tether run`` in the harness, killed at ``at``; returns once the process is reaped.

        Its lease is the default 30 s and nothing waits for it: a dead driver's
        lock is released by the kernel, so the run is free at once.
        """
        env = self.env(CRASH_AT=at)
        return self._call([sys.executable, str(HARNESS), *self.run_argv(prompt)], env)

    def start(self, *argv: str, harness: bool = False, **env: str) -> subprocess.Popen[str]:
        """A ``tether`` (or, with ``harness``, a crash harness) process left running; see ``stop``."""
        command = [sys.executable, str(HARNESS), *argv] if harness else self.command(*argv)
        return subprocess.Popen(
            command, env=self.env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8"
        )

    def resume(self, run_id: str) -> Done:
        return self.tether("resume", run_id, "--db", str(self.db), "--api-key", "x")

    # --- what the processes left behind ---------------------------------------------

    @contextmanager
    def store(self) -> Iterator[RunStore]:
        store = SQLiteStore(self.db)
        try:
            yield store
        finally:
            store.close()

    def run_id(self) -> str:
        with self.store() as store:
            runs = store.list_runs()
        assert len(runs) == 1, runs
        return runs[0].run_id

    def events(self, run_id: str) -> list[StoredEvent]:
        with self.store() as store:
            return store.events(run_id)

    def effect_lines(self) -> list[str]:
        return self.effects.read_text(encoding="utf-8").splitlines() if self.effects.exists() else []

    def effects_of(self, run_id: str, call_id: str = CALL) -> list[str]:
        return [line for line in self.effect_lines() if line.split("\t")[0] == f"{run_id}:{call_id}"]

    def tool_message_sent(self, request: int, call_id: str = CALL) -> dict[str, Any]:
        """The envelope the model received for ``call_id`` in request number ``request`` (0-based)."""
        found = [
            m
            for m in self.server.requests[request]["messages"]
            if m.get("role") == "tool" and m.get("tool_call_id") == call_id
        ]
        assert len(found) == 1, self.server.requests[request]["messages"]
        envelope: dict[str, Any] = json.loads(found[0]["content"])
        return envelope


def kinds(events: Sequence[StoredEvent]) -> list[str]:
    return [e.kind for e in events]


def after_last_resume(events: Sequence[StoredEvent]) -> list[StoredEvent]:
    starts = [i for i, e in enumerate(events) if e.kind == "run_resumed"]
    assert starts, kinds(events)
    return list(events[starts[-1] :])


def assert_transcript(store: RunStore, run_id: str, tool: str, answer: str, call_id: str = CALL) -> str:
    """user, assistant with the one call, exactly one tool message for it, final assistant; returns the tool content."""
    messages = store.messages(run_id)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"], messages
    assert [(c.id, c.name) for c in messages[1].tool_calls] == [(call_id, tool)]
    assert messages[2].tool_call_id == call_id
    assert messages[3].content == answer and not messages[3].tool_calls
    return messages[2].content or ""


def wait_for(path: Path, process: subprocess.Popen[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"process ended {process.returncode} before {path} appeared:\n{out}\n{err}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout}s")
        time.sleep(0.05)


def stop(process: subprocess.Popen[str]) -> Done:
    """SIGKILL ``process`` if it still runs, and reap it (a zombie would still look alive)."""
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    out, err = process.communicate(timeout=TIMEOUT)
    return Done(process.returncode, out, err)


@contextmanager
def bench(tmp_path: Path, script: Any) -> Iterator[Bench]:
    with FakeServer(script=script) as server:
        yield Bench(tmp_path / "runs.db", tmp_path / "effects.log", server)
