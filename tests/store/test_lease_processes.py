"""One driver at a time: a second ``tether resume`` on a run being driven gets a clear error.

The holder is a real ``tether run`` paused inside a slow side-effecting tool:
it holds the run's lock (a kernel lock on the run store's ``.locks`` file)
and its lease. Once the holder is SIGKILLed the kernel drops its lock and
``tether resume`` takes over at once, without waiting for the lease (the
default 30 s) to run out; the call's unknown outcome is reconciled by the
tool's hook and the effect happens once. Whether the holder's pid answers (a
zombie does; a restart may get the same pid) plays no part.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from process_helpers import (
    CALL,
    HARNESS,
    SIGKILLED,
    TIMEOUT,
    Bench,
    Done,
    after_last_resume,
    bench,
    kinds,
    stop,
    wait_for,
)

from tether.testing.fake_server import text, tool_calls


def script() -> list[object]:
    return [tool_calls([(CALL, "close_ticket", '{"ticket": "T-1"}')]), text("Closed.")]


def assert_refused(done: Done, run_id: str) -> None:
    """Exit 5 and one line on stderr that names the run."""
    assert done.code == 5, done
    lines = done.err.splitlines()
    assert len(lines) == 1, done.err
    assert lines[0].startswith(f"error: run {run_id} is being driven by "), done.err
    assert done.out == ""


def finish_once(b: Bench, run_id: str) -> None:
    """A resume after the holder died completes, the call having taken effect exactly once."""
    taken = b.resume(run_id)
    assert taken.code == 0, taken
    assert f"run {run_id}: completed" in taken.out
    assert len(b.effects_of(run_id)) == 1 and len(b.effect_lines()) == 1
    after = after_last_resume(b.events(run_id))
    settled = next(e for e in after if e.kind == "reconciled")
    assert settled.data == {"id": CALL, "tool": "close_ticket", "executed": False, "by": "reconcile hook"}
    assert kinds(after).count("call_executed") == 1
    verified = b.tether("runs", "verify", run_id, "--db", str(b.db))
    assert verified.code == 0, verified


def test_a_second_driver_is_refused_until_the_holder_dies(tmp_path: Path) -> None:
    with bench(tmp_path, script()) as b:
        holder = b.start(*b.run_argv(), harness=True, CRASH_SLOW="600")
        try:
            wait_for(Path(f"{b.effects}.started"), holder)
            run_id = b.run_id()

            assert_refused(b.resume(run_id), run_id)
            # Nor may a person settle the call while it is being executed.
            meddling = b.tether("reconcile", run_id, CALL, "--not-executed", "--db", str(b.db))
            assert meddling.code == 5, meddling
            assert holder.poll() is None, "the refused drivers must not disturb the holder"
            with b.store() as store:
                assert store.ledger_entry(run_id, CALL) is not None  # the intent the holder committed
                assert kinds(store.events(run_id))[-1] == "intent_recorded"

        finally:
            killed = stop(holder)  # SIGKILL, then reaped: a zombie would still look alive
        assert killed.code == SIGKILLED, killed

        assert b.effect_lines() == []  # killed before the effect
        lease_until = lease_of(b, run_id)
        finish_once(b, run_id)  # at once: the 30 s lease of the dead holder is not waited for
        assert time.time() < lease_until


def test_two_resumes_racing_after_a_crash_one_drives_the_other_is_refused(tmp_path: Path) -> None:
    with bench(tmp_path, script()) as b:
        died = b.crash("intent_recorded")
        assert died.code == SIGKILLED, died
        run_id = b.run_id()
        # Both start at once; the winner then waits inside the tool, holding the lease, until the loser is done.
        argv = ("resume", run_id, "--db", str(b.db), "--api-key", "x")
        racers = [b.start(*argv, CRASH_SLOW="60") for _ in range(2)]
        try:
            deadline = time.monotonic() + 60
            while all(r.poll() is None for r in racers) and time.monotonic() < deadline:
                time.sleep(0.05)
            [loser] = [r for r in racers if r.poll() is not None]
            [winner] = [r for r in racers if r is not loser]
            assert_refused(Done(loser.returncode, *loser.communicate(timeout=TIMEOUT)), run_id)
            assert Path(f"{b.effects}.started").exists() and winner.poll() is None
            Path(f"{b.effects}.go").touch()
            out, err = winner.communicate(timeout=TIMEOUT)
        finally:
            for racer in racers:
                stop(racer)
        assert winner.returncode == 0, (out, err)
        assert len(b.effects_of(run_id)) == 1 and len(b.effect_lines()) == 1
        events = b.events(run_id)
        assert kinds(events).count("run_resumed") == 1
        assert kinds(events).count("call_executed") == 1
        assert len(b.server.requests) == 2


def test_a_driver_inside_a_tool_longer_than_the_lease_still_holds_the_run(tmp_path: Path) -> None:
    with bench(tmp_path, script()) as b:
        # A 2 s lease stands in for the default 30 s: the tool runs longer than the lease.
        holder = b.start(*b.run_argv(), harness=True, CRASH_LEASE_SECONDS="2", CRASH_SLOW="600")
        try:
            wait_for(Path(f"{b.effects}.started"), holder)
            run_id = b.run_id()
            time.sleep(4)  # the lease has expired; the holder is alive and still inside the tool
            assert holder.poll() is None
            second = b.resume(run_id)
            alive = holder.poll() is None
        finally:
            killed = stop(holder)
        assert alive and killed.code == SIGKILLED, killed
        # Expected: refused as long as the holder drives the run, and no second execution.
        assert b.effect_lines() == [], "the second driver ran the call while the first was still executing it"
        assert_refused(second, run_id)


def test_a_driver_killed_but_not_reaped_frees_its_run_at_once(tmp_path: Path) -> None:
    with bench(tmp_path, script()) as b:
        holder = b.start(*b.run_argv(), harness=True, CRASH_AT="intent_recorded")
        try:
            # Dead, but nobody reaped it: a zombie, whose pid still answers kill(pid, 0).
            os.waitid(os.P_PID, holder.pid, os.WEXITED | os.WNOWAIT)
            os.kill(holder.pid, 0)
            run_id = b.run_id()
            lease_until = lease_of(b, run_id)
            finish_once(b, run_id)
            assert time.time() < lease_until  # taken over long before the dead holder's lease would end
            assert holder.returncode is None  # still unreaped while the run was taken over
        finally:
            killed = stop(holder)
        assert killed.code == SIGKILLED, killed


def lease_of(b: Bench, run_id: str) -> float:
    """When the lease on ``run_id`` runs out, as its (dead) holder last wrote it."""
    with sqlite3.connect(b.db) as db:
        (until,) = db.execute("SELECT lease_until FROM runs WHERE id = ?", (run_id,)).fetchone()
    assert until is not None and until > time.time() + 10, until  # the default 30 s lease, far from over
    return float(until)


def in_new_pid_namespace(argv: list[str]) -> list[str]:
    """``argv`` as pid 2 of a new PID namespace (pid 1 is the shell: init ignores a SIGKILL sent from inside)."""
    unshare = shutil.which("unshare")
    assert unshare is not None
    return [unshare, "--pid", "--fork", "--kill-child", "sh", "-c", '"$@"; exit $?', "sh", *argv]


def pid_namespaces_available() -> str | None:
    """Why this machine cannot run a process in a new PID namespace, or None."""
    if shutil.which("unshare") is None:
        return "unshare is missing (util-linux)"
    if os.geteuid() != 0:
        return "a new PID namespace needs root"
    probe = subprocess.run(
        in_new_pid_namespace([sys.executable, "-c", "import os; print(os.getpid())"]),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    if probe.returncode != 0 or probe.stdout.strip() != "2":
        return f"unshare --pid --fork does not work here: {probe.stderr.strip() or probe.stdout.strip()}"
    return None


def test_a_restart_with_the_dead_owners_pid_takes_the_run_over(tmp_path: Path) -> None:
    """A service restarted in a container gets the pid of the process that died: the run is not locked forever."""
    why = pid_namespaces_available()
    if why is not None:
        pytest.skip(why)
    with bench(tmp_path, script()) as b:
        harness = [sys.executable, str(HARNESS), *b.run_argv()]
        env = b.env(CRASH_AT="intent_recorded")
        died = subprocess.run(in_new_pid_namespace(harness), env=env, capture_output=True, timeout=TIMEOUT, check=False)
        assert died.returncode in (128 + 9, SIGKILLED), died
        run_id = b.run_id()
        with sqlite3.connect(b.db) as db:
            (owner,) = db.execute("SELECT lease_owner FROM runs WHERE id = ?", (run_id,)).fetchone()
        assert owner is not None and owner.split(":")[1] == "2", owner  # the dead driver was pid 2

        lease_until = lease_of(b, run_id)
        resume = [*b.command("resume", run_id, "--db", str(b.db), "--api-key", "x")]
        taken = subprocess.run(
            in_new_pid_namespace(resume), env=b.env(), capture_output=True, text=True, timeout=TIMEOUT, check=False
        )  # pid 2 again, on the same host: to a pid check, the owner is alive
        assert taken.returncode == 0, (taken.stdout, taken.stderr)
        assert f"run {run_id}: completed" in taken.stdout
        assert time.time() < lease_until  # at once, not once the dead driver's lease ran out
        assert len(b.effects_of(run_id)) == 1 and len(b.effect_lines()) == 1
        assert b.tether("runs", "verify", run_id, "--db", str(b.db)).code == 0
