"""``tether eval`` as a user runs it: a real subprocess, killed with SIGKILL and started again."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bfcl_oracle import Oracle, Output, oracle_output

from tether.eval import load
from tether.testing.fake_server import FakeServer

FIXTURE = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "bfcl" / "BFCL_v4_simple_python.json"
CASES = 30


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TETHER_"))}
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _tether_eval(server: FakeServer, out: Path, *extra: str, limit: int = CASES) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "tether", "eval", str(FIXTURE), "--limit", str(limit), "--out", str(out)]
    argv += ["--base-url", server.base_url, "--model", "fake", "--api-key", "x", *extra]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())


def _ids(out: Path) -> list[str]:
    path = out / "results.jsonl"
    if not path.exists():
        return []
    ids = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):  # a torn line
            ids.append(json.loads(line)["id"])
    return ids


def test_a_killed_eval_resumes_without_sending_finished_cases_again(tmp_path: Path) -> None:
    cases = load(FIXTURE)[:CASES]
    outputs: dict[str, Output] = {c.id: oracle_output(c) for c in cases}
    oracle = Oracle(cases, outputs)
    with FakeServer(oracle, latency=0.2) as server:
        first = _tether_eval(server, tmp_path, "--concurrency", "2")
        deadline = time.monotonic() + 60
        while len(_ids(tmp_path)) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=10)
        assert first.returncode == -signal.SIGKILL
        before = set(_ids(tmp_path))
        assert 6 <= len(before) < CASES
        asked_before = len(oracle.asked)

        second = _tether_eval(server, tmp_path, "--concurrency", "4")
        out, err = second.communicate(timeout=90)
        assert second.returncode == 0, err
        asked_again = oracle.asked[asked_before:]

    assert not before & set(asked_again)  # finished cases are not sent again
    ids = _ids(tmp_path)
    assert sorted(set(ids)) == sorted(c.id for c in cases)
    assert len(ids) == CASES  # one line per case: the first run's and the second run's together
    assert "simple_python" in out and "accuracy" in out and "Traceback" not in out + err


def test_eval_json_summary_and_precise_errors(tmp_path: Path) -> None:
    cases = load(FIXTURE)[:3]
    with FakeServer(Oracle(cases, {c.id: oracle_output(c) for c in cases})) as server:
        done = _tether_eval(server, tmp_path, "--json", limit=3)
        out, err = done.communicate(timeout=60)
    assert done.returncode == 0, err
    row = json.loads(out.splitlines()[0])
    assert row == {
        "category": "simple_python",
        "cases": 3,
        "passed": 3,
        "mistakes": 0,
        "refused": 0,
        "errors": 0,
        "accuracy": 1.0,
    }

    argv = [
        sys.executable,
        "-m",
        "tether",
        "eval",
        str(tmp_path / "nope.json"),
        "--base-url",
        "http://x",
        "--model",
        "m",
    ]
    missing = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=60)
    assert missing.returncode == 3
    assert "no dataset" in missing.stderr and "Traceback" not in missing.stderr

    memory = tmp_path / "BFCL_v4_memory.json"
    memory.write_text("")
    argv[4] = str(memory)
    refused = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=60)
    assert refused.returncode == 3
    assert "'memory' is not supported yet" in refused.stderr


def test_an_unknown_provider_is_a_configuration_error(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "tether", "eval", str(FIXTURE), "--provider", "nope", "--out", str(tmp_path)]
    argv += ["--base-url", "http://127.0.0.1:9/v1", "--model", "m"]
    done = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=60)
    assert done.returncode == 3
    assert "unknown provider 'nope'" in done.stderr and "Traceback" not in done.stderr


def test_the_provider_profile_builds_the_model_as_tether_run_does(tmp_path: Path) -> None:
    """``--provider anthropic`` speaks the Messages API (the profile's protocol), as ``tether run`` does."""
    cases = load(FIXTURE)[:3]
    env = {k: v for k, v in _env().items() if not k.startswith("ANTHROPIC_")}
    with FakeServer(Oracle(cases, {c.id: oracle_output(c) for c in cases})) as server:
        argv = [sys.executable, "-m", "tether", "eval", str(FIXTURE), "--limit", "3", "--out", str(tmp_path)]
        argv += ["--provider", "anthropic", "--base-url", server.origin, "--model", "fake", "--api-key", "x", "--json"]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0])["passed"] == 3
    assert len(server.requests) == 3
    assert all("max_tokens" in r and "messages" in r for r in server.requests)  # Messages API requests


def test_protocol_responses_builds_the_model_as_tether_run_does(tmp_path: Path) -> None:
    """``--protocol responses`` speaks OpenAI's Responses API, as ``tether run --protocol responses`` does."""
    cases = load(FIXTURE)[:3]
    with FakeServer(Oracle(cases, {c.id: oracle_output(c) for c in cases})) as server:
        done = _tether_eval(server, tmp_path, "--protocol", "responses", "--json", limit=3)
        out, err = done.communicate(timeout=60)
    assert done.returncode == 0, err
    assert json.loads(out.splitlines()[0])["passed"] == 3
    assert len(server.requests) == 3
    assert all("input" in r and "messages" not in r for r in server.requests)  # Responses API requests
    assert all(t["type"] == "function" and "name" in t for r in server.requests for t in r["tools"])


def test_the_eval_command_imports_no_pydantic_no_jsonschema_and_no_web_framework() -> None:
    """What ``tether eval`` loads before its first request is start-up time the whole eval waits for.

    jsonschema is loaded only to explain an invalid call (or vouch for an unusual schema)."""
    code = (
        "import sys, tether.cli.main, tether.eval, tether.eval.report, tether.models.openai_chat\n"
        "import tether.drivers.local.runner\n"
        "from tether.eval import load\n"
        f"tools = load({str(FIXTURE)!r})[0].tools()\n"
        "assert tools[0].validation_errors({'base': 10, 'height': 5}) == []\n"
        "heavy = ('pydantic', 'pydantic_core', 'jsonschema', 'fastapi', 'starlette', 'uvicorn', 'llama_cpp')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_with_no_endpoint_the_embedded_model_is_scored_as_tether_run_would_use_it(tmp_path: Path) -> None:
    """No OPENAI_BASE_URL or OPENAI_API_KEY: ``tether eval`` scores the embedded model (SmolLM2-135M), as
    ``tether run`` answers with it, and says so; TETHER_LOCAL=off makes that a configuration error again."""
    tickets = Path(__file__).resolve().parents[2] / "examples" / "eval" / "tickets.jsonl"
    argv = [sys.executable, "-m", "tether", "eval", str(tickets), "--limit", "1", "--out", str(tmp_path), "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "using the local model SmolLM2-135M-Instruct" in done.stderr
    row = json.loads(done.stdout.splitlines()[0])
    assert row["cases"] == 1 and row["errors"] == 0
    assert [line["id"] for line in map(json.loads, (tmp_path / "results.jsonl").read_text().splitlines())]

    off = subprocess.run(argv, capture_output=True, text=True, env={**_env(), "TETHER_LOCAL": "off"}, timeout=60)
    assert off.returncode == 3
    error = json.loads(off.stdout)["error"]  # --json: the failure is JSON too
    assert "no model endpoint configured" in error["message"] and "Traceback" not in off.stderr
