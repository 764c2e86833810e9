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

import pytest
from bfcl_oracle import Oracle, Output, oracle_output

import tether
from tether.eval import load
from tether.testing.fake_server import FakeServer, raw

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


# ---------------------------------------------------------------- what the results were made with (eval.json)


def _oracle_server(limit: int) -> FakeServer:
    """The oracle's answers, whatever system message comes first (the oracle finds a case by its messages)."""
    cases = load(FIXTURE)[:limit]
    oracle = Oracle(cases, {c.id: oracle_output(c) for c in cases})
    return FakeServer(lambda r: oracle({**r, "messages": [m for m in r["messages"] if m["role"] != "system"]}))


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_the_eval_is_recorded_and_resumed_with_the_same_options(tmp_path: Path) -> None:
    options = ("-s", "Answer with tool calls.", "-o", "temperature=0.2", "--json")
    with _oracle_server(5) as server:
        first = _tether_eval(server, tmp_path, *options, limit=3)
        _, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
        record = json.loads((tmp_path / "eval.json").read_text())
        assert record == {
            "benchmark": "tether eval",
            "model": "fake",
            "endpoint": server.base_url,  # http://127.0.0.1:PORT/v1
            "protocol": "openai",
            "provider": "default",
            "system": "Answer with tool calls.",
            "model_settings": {"temperature": 0.2},
            "compat": [],
            "setting": None,
            "versions": [f"tether {tether.__version__}"],
        }
        assert "x" not in record.values()  # the API key is not recorded

        second = _tether_eval(server, tmp_path, *options, limit=5)
        out, err = second.communicate(timeout=60)
        assert second.returncode == 0, err
        assert len(server.requests) == 5  # the first three were not sent again
    assert json.loads(out.splitlines()[0])["cases"] == 5
    assert json.loads((tmp_path / "eval.json").read_text()) == record
    report = (tmp_path / "report.html").read_text()
    assert '<p data-testid="eval-record">Model: <code>fake</code> at <code>127.0.0.1:' in report
    assert f"Made with tether {tether.__version__}.</p>" in report


def _record_edited(out: Path, **changes: object) -> dict[str, object]:
    """eval.json with ``changes`` (a None value: the field taken out), written back; the record before."""
    record = json.loads((out / "eval.json").read_text())
    edited = {k: v for k, v in {**record, **changes}.items() if v is not None}
    (out / "eval.json").write_text(json.dumps(edited))
    return dict(record)


def test_results_made_by_another_tether_are_not_resumed(tmp_path: Path) -> None:
    """Another version of tether scores cases with other gates and checks: its verdicts are another eval's."""
    with _oracle_server(5) as server:
        first = _tether_eval(server, tmp_path, limit=3)
        _, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
        _record_edited(tmp_path, versions=["tether 0.0.9"])
        before = _files(tmp_path)
        again = _tether_eval(server, tmp_path, limit=5)
        _, err = again.communicate(timeout=60)
        sent = len(server.requests)
    assert again.returncode == 3 and "Traceback" not in err
    said = (
        f'versions (the installed tether and benchmark): ["tether 0.0.9"] there, ["tether {tether.__version__}"] here'
    )
    assert said in err
    assert sent == 3 and _files(tmp_path) == before


def test_a_record_made_before_versions_were_recorded_is_resumed_and_completed(tmp_path: Path) -> None:
    with _oracle_server(5) as server:
        first = _tether_eval(server, tmp_path, limit=3)
        _, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
        record = _record_edited(tmp_path, versions=None)  # as the tether before them wrote it
        again = _tether_eval(server, tmp_path, limit=5)
        _, err = again.communicate(timeout=60)
        assert again.returncode == 0, err
        assert len(server.requests) == 5
    assert json.loads((tmp_path / "eval.json").read_text()) == record


@pytest.mark.parametrize(
    ("changed", "said"),
    [
        (("--model", "other"), 'model (--model): "fake" there, "other" here'),
        (("-s", "Be brief."), 'system (-s): (none) there, "Be brief." here'),
        (("-o", "temperature=0.7"), 'model_settings (-o): {"temperature": 0.2} there, {"temperature": 0.7} here'),
        (("--protocol", "responses"), 'protocol (--protocol): "openai" there, "responses" here'),
    ],
)
def test_resuming_with_other_options_is_refused_and_changes_nothing(
    tmp_path: Path, changed: tuple[str, ...], said: str
) -> None:
    with _oracle_server(5) as server:
        first = _tether_eval(server, tmp_path, "-o", "temperature=0.2", limit=3)
        _, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
        before = _files(tmp_path)
        again = _tether_eval(server, tmp_path, "-o", "temperature=0.2", *changed, limit=5)
        _, err = again.communicate(timeout=60)
        sent = len(server.requests)
    assert again.returncode == 3, err
    assert said in err and "another --out" in err and str(tmp_path / "eval.json") in err
    assert "Traceback" not in err
    assert sent == 3  # nothing sent for the second eval
    assert _files(tmp_path) == before  # results.jsonl, eval.json and report.html as they were


def test_resuming_against_another_endpoint_is_refused(tmp_path: Path) -> None:
    with _oracle_server(3) as server:
        first = _tether_eval(server, tmp_path, limit=3)
        _, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
    before = _files(tmp_path)
    with _oracle_server(3) as other:  # another port
        again = _tether_eval(other, tmp_path, limit=3)
        _, err = again.communicate(timeout=60)
    assert again.returncode == 3, err
    assert f'endpoint (--base-url): "{server.base_url}" there, "{other.base_url}" here' in err
    assert _files(tmp_path) == before and not other.requests


def test_a_folder_made_before_the_record_is_resumed_and_recorded(tmp_path: Path) -> None:
    """An --out of an older tether has results.jsonl and no eval.json: taken as this eval's, then recorded."""
    with _oracle_server(5) as server:
        first = _tether_eval(server, tmp_path, limit=3)
        _, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
        (tmp_path / "eval.json").unlink(missing_ok=True)  # as an older tether left it
        again = _tether_eval(server, tmp_path, "-s", "Be brief.", limit=5)
        _, err = again.communicate(timeout=60)
        assert again.returncode == 0, err
        assert len(server.requests) == 5
        assert json.loads((tmp_path / "eval.json").read_text())["system"] == "Be brief."
        third = _tether_eval(server, tmp_path, limit=5)  # from now on, the record holds
        _, err = third.communicate(timeout=60)
    assert third.returncode == 3 and 'system (-s): "Be brief." there, (none) here' in err


def test_a_folder_with_no_verdict_takes_the_new_options(tmp_path: Path) -> None:
    """Every case an error (a wrong model name, say): nothing was scored, so nothing would mix."""
    with FakeServer(lambda request: raw({"error": {"message": "no such model"}}, status=404)) as failing:
        first = _tether_eval(failing, tmp_path, "--model", "typo", limit=2)
        _, err = first.communicate(timeout=60)
    assert first.returncode == 1, err
    with _oracle_server(2) as server:
        again = _tether_eval(server, tmp_path, limit=2)
        _, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    assert json.loads((tmp_path / "eval.json").read_text())["model"] == "fake"


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("{not json", "(not JSON: "),
        ("[1, 2]", "(expected a JSON object)"),
        ('{"benchmark": "tether eval", "model": "fake"}', "(no endpoint)"),
        ('{"benchmark": "tether eval", "model": 7, "endpoint": "x"}', "(model must be a string)"),
        ('{"benchmark": "b", "model": "m", "endpoint": "e", "compat": [1]}', "(compat must be a list of strings)"),
        (b"\xff\xfe", "(not UTF-8 text)"),
        ("[" * 100_000, "(nested more than 64 levels deep)"),
    ],
)
def test_a_record_that_is_no_record_is_a_configuration_error_naming_it(
    tmp_path: Path, content: str | bytes, said: str
) -> None:
    with _oracle_server(3) as server:
        first = _tether_eval(server, tmp_path, limit=2)
        _, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
        record = tmp_path / "eval.json"
        record.write_bytes(content.encode() if isinstance(content, str) else content)
        before = _files(tmp_path)
        again = _tether_eval(server, tmp_path, limit=3)
        _, err = again.communicate(timeout=60)
        sent = len(server.requests)
    assert again.returncode == 3, err
    assert f"{record}: not an eval record (" in err and said in err and "Traceback" not in err
    assert sent == 2 and _files(tmp_path) == before
