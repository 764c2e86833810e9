"""``tether eval agentdojo`` as a user runs it: a real subprocess, killed with SIGKILL and started again."""

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

import tether
from tether.eval.agentdojo import AGENTDOJO_VERSION, INSTALL_HINT

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TETHER_"))}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env["CI"] = "1"  # no progress bar
    return env


def _tether(*argv: str, block_agentdojo: bool = False) -> subprocess.Popen[str]:
    # A process in which `import agentdojo` fails, as where it is not installed.
    prelude = "import sys; sys.modules['agentdojo'] = None; " if block_agentdojo else ""
    code = (
        prelude + "import runpy; sys.argv = ['tether', *sys.argv[1:]]; runpy.run_module('tether', run_name='__main__')"
    )
    if not block_agentdojo:
        code = "import sys; " + code
    return subprocess.Popen(
        [sys.executable, "-c", code, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )


def _lines(out: Path) -> dict[str, str]:
    path = out / "results.jsonl"
    found: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError, KeyError):  # a torn line
                found[json.loads(line)["id"]] = line
    return found


def test_without_agentdojo_the_command_says_what_to_install() -> None:
    done = _tether("eval", "agentdojo", "--scripted", "oracle", "--setting", "no-gate", block_agentdojo=True)
    _, stderr = done.communicate(timeout=60)
    assert done.returncode == 3, stderr
    assert INSTALL_HINT in stderr and "Traceback" not in stderr


def test_a_killed_agentdojo_eval_resumes_without_running_finished_cases_again(tmp_path: Path) -> None:
    pytest.importorskip("agentdojo.task_suite.load_suites")
    argv = ("eval", "agentdojo", "--scripted", "gullible", "--suite", "workspace", "--limit", "3")
    argv += ("--attack", "important_instructions", "--setting", "no-gate", "--out", str(tmp_path))
    first = _tether(*argv, "--concurrency", "1")
    results = tmp_path / "no-gate"
    deadline = time.monotonic() + 120
    while len(_lines(results)) < 5 and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=10)
    assert first.returncode == -signal.SIGKILL
    before = _lines(results)
    assert 5 <= len(before) < 42

    second = _tether(*argv, "--concurrency", "2", "--json")
    stdout, stderr = second.communicate(timeout=300)
    assert second.returncode == 0, stderr
    after = _lines(results)
    assert len(after) == 42 == len((results / "results.jsonl").read_text().splitlines())
    for case_id, line in before.items():  # each finished case kept as it was (its timing included): not run again
        assert after[case_id] == line
    row = json.loads(stdout.splitlines()[0])
    assert (row["setting"], row["suite"], row["pairs"]) == ("no-gate", "workspace", 42)
    report = (results / "report.html").read_text()
    assert 'data-testid="agentdojo"' in report


def test_settings_go_to_their_own_folders_and_compare(tmp_path: Path) -> None:
    pytest.importorskip("agentdojo.task_suite.load_suites")
    argv = ("eval", "agentdojo", "--scripted", "oracle", "--suite", "banking", "--attack", "none")
    done = _tether(*argv, "--setting", "no-gate", "--setting", "taint", "--out", str(tmp_path))
    stdout, stderr = done.communicate(timeout=300)
    assert done.returncode == 0, stderr
    lines = stdout.splitlines()
    assert lines[1].split()[:4] == ["no-gate", "banking", "none", "100.0%"]
    assert lines[2].split()[:2] == ["taint", "banking"]
    compared = _tether("eval", "compare", str(tmp_path / "no-gate"), str(tmp_path / "taint"))
    stdout, stderr = compared.communicate(timeout=60)
    assert compared.returncode == 0, stderr
    assert "banking/none: accuracy 100.0% -> 100.0%" in stdout


def test_an_endpoint_is_measured_through_its_api_tokens_and_all(tmp_path: Path) -> None:
    pytest.importorskip("agentdojo.task_suite.load_suites")
    from tether.testing import text, tool_calls
    from tether.testing.fake_server import FakeServer

    def answer(request: dict[str, object]) -> object:
        messages = request["messages"]
        assert isinstance(messages, list)
        if not any(m.get("role") == "tool" for m in messages):
            return tool_calls([("call_1", "get_iban", "{}")])
        return text("Your IBAN is the one above.")

    with FakeServer(answer) as server:
        argv = ("eval", "agentdojo", "--suite", "banking", "--limit", "1", "--attack", "none", "--setting", "taint")
        done = _tether(
            *argv, "--base-url", server.base_url, "--model", "fake", "--api-key", "x", "--out", str(tmp_path)
        )
        stdout, stderr = done.communicate(timeout=120)
        first = server.requests[0]
    assert done.returncode == 0, stderr
    assert first["messages"][0]["role"] == "system" and "Emma Johnson" in first["messages"][0]["content"]
    assert {t["function"]["name"] for t in first["tools"]} >= {"send_money", "read_file", "get_iban"}
    (line,) = _lines(tmp_path / "taint").values()
    result = json.loads(line)
    assert [c["tool"] for c in result["calls"]] == ["get_iban"] and result["calls"][0]["executed"]
    assert result["scores"]["tokens"] == 30  # two requests of 10 + 5, as the server counted them
    assert result["scores"]["utility"] is False and result["outcome"] == "mistake"
    assert "lost (taint): banking/none/user_task_0" in stdout


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (("--attack", "nosuch"), "no AgentDojo attack 'nosuch'"),
        # AgentDojo's manual attack calls input() per case: on a closed stdin the whole eval aborted, results lost.
        (("--attack", "manual"), "the manual attack asks for each injection's text on the terminal"),
        (("--model", "gpt-4o"), "--scripted takes no --model"),
    ],
)
def test_a_bad_option_is_a_configuration_error_before_anything_runs(
    tmp_path: Path, extra: tuple[str, ...], said: str
) -> None:
    pytest.importorskip("agentdojo.task_suite.load_suites")
    done = _tether("eval", "agentdojo", "--scripted", "oracle", "--setting", "no-gate", "--out", str(tmp_path), *extra)
    _, stderr = done.communicate(timeout=60)
    assert done.returncode == 3 and said in stderr and "Traceback" not in stderr
    assert not any(tmp_path.iterdir())


def _keyed(value: object, key: str) -> list[object]:
    """Every value held under ``key`` at any depth of ``value``."""
    if isinstance(value, dict):
        return [*([value[key]] if key in value else []), *(v for item in value.values() for v in _keyed(item, key))]
    if isinstance(value, list):
        return [v for item in value for v in _keyed(item, key)]
    return []


def test_results_keep_no_credential_a_call_passed(tmp_path: Path) -> None:
    # Banking's user task 14 changes the password: the call's arguments, the approval asked for it and the
    # ground truth each hold it under "password". results.jsonl is a log: those values are redacted there, as
    # in the run store's events (the scores were taken on the real values first).
    pytest.importorskip("agentdojo.task_suite.load_suites")
    argv = ("eval", "agentdojo", "--scripted", "oracle", "--suite", "banking", "--attack", "none")
    done = _tether(*argv, "--setting", "taint", "--out", str(tmp_path))
    _, stderr = done.communicate(timeout=300)
    assert done.returncode == 0, stderr
    lines = [json.loads(line) for line in (tmp_path / "taint" / "results.jsonl").read_text().splitlines()]
    passwords = [v for line in lines for v in _keyed(line, "password")]
    assert len(passwords) >= 3  # the call, its approval and the ground truth, at least
    assert set(passwords) == {"[redacted]"}
    changed = next(line for line in lines if line["id"].endswith("user_task_14"))
    assert changed["valid"] is True  # scored on the password the call really passed


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_each_setting_records_its_eval_and_resumes_with_the_same_one(tmp_path: Path) -> None:
    pytest.importorskip("agentdojo.task_suite.load_suites")
    argv = ("eval", "agentdojo", "--scripted", "oracle", "--suite", "banking", "--attack", "none")
    argv += ("--setting", "taint", "--out", str(tmp_path))
    first = _tether(*argv, "--limit", "1")
    _, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr
    record = json.loads((tmp_path / "taint" / "eval.json").read_text())
    assert record["endpoint"] == "scripted:oracle" and record["setting"] == "taint"
    assert record["benchmark"] == "agentdojo v1.2" and record["system"] is None
    assert record["versions"] == [f"tether {tether.__version__}", f"agentdojo {AGENTDOJO_VERSION}"]

    again = _tether(*argv, "--limit", "2")
    _, stderr = again.communicate(timeout=300)
    assert again.returncode == 0, stderr
    assert len(_lines(tmp_path / "taint")) == 2
    assert json.loads((tmp_path / "taint" / "eval.json").read_text()) == record


def test_another_scripted_model_in_any_setting_folder_is_refused_before_any_setting_runs(tmp_path: Path) -> None:
    pytest.importorskip("agentdojo.task_suite.load_suites")
    argv = ("eval", "agentdojo", "--suite", "banking", "--attack", "none", "--limit", "1", "--out", str(tmp_path))
    first = _tether(*argv, "--scripted", "oracle", "--setting", "taint")
    _, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr
    before = _files(tmp_path)

    # no-gate comes first and its folder is new: still nothing runs, since taint's holds another eval's results
    again = _tether(*argv, "--scripted", "gullible", "--setting", "no-gate", "--setting", "taint")
    _, stderr = again.communicate(timeout=300)
    assert again.returncode == 3, stderr
    assert 'model (--model): "oracle" there, "gullible" here' in stderr
    assert 'endpoint (--base-url): "scripted:oracle" there, "scripted:gullible" here' in stderr
    assert str(tmp_path / "taint" / "eval.json") in stderr and "Traceback" not in stderr
    assert _files(tmp_path) == before  # results.jsonl byte for byte, and no no-gate folder


def test_a_setting_record_that_is_no_record_is_a_configuration_error_naming_it(tmp_path: Path) -> None:
    pytest.importorskip("agentdojo.task_suite.load_suites")
    argv = ("eval", "agentdojo", "--scripted", "oracle", "--suite", "banking", "--attack", "none", "--limit", "1")
    argv += ("--setting", "no-gate", "--out", str(tmp_path))
    first = _tether(*argv)
    _, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr
    record = tmp_path / "no-gate" / "eval.json"
    record.write_text('{"benchmark": "agentdojo v1.2", "model": "oracle", "endpoint": "scripted:oracle", "setting": 1}')
    before = _files(tmp_path)
    again = _tether(*argv)
    _, stderr = again.communicate(timeout=300)
    assert again.returncode == 3, stderr
    assert f"{record}: not an eval record (setting must be a string or null)" in stderr and "Traceback" not in stderr
    assert _files(tmp_path) == before
