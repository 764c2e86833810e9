"""What ``tether eval`` leaves to read: the progress bar, report.html (opened in Chromium), ``eval compare``.

Real subprocesses of the command against a FakeServer oracle; the report is
opened by tests/e2e/eval_report.mjs (playwright-core driving Debian's
Chromium, as tests/e2e/test_browser.py does).
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bfcl_oracle import DATA, Oracle, Output, oracle_output

from tether.eval import Case, load
from tether.eval.harness import CaseResult
from tether.eval.report import html_report
from tether.testing.fake_server import FakeServer, ReplySpec, text

ROOT = Path(__file__).resolve().parents[2]
E2E = ROOT / "tests" / "e2e"
if str(E2E) not in sys.path:  # the browser tests' set-up check (tests/e2e/chromium.py)
    sys.path.insert(0, str(E2E))

from chromium import CHROMIUM, require_browser  # noqa: E402

SIMPLE, IRRELEVANCE = DATA / "BFCL_v4_simple_python.json", DATA / "BFCL_v4_irrelevance.json"
HOSTILE = "<script>window.pwned = true; document.title = 'pwned'</script><img src=x onerror=alert(1)>"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TETHER_")) and k != "CI"}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return {**env, **extra}


def _argv(server: FakeServer, out: Path, limit: int, *extra: str) -> list[str]:
    argv = [sys.executable, "-m", "tether", "eval", str(SIMPLE), str(IRRELEVANCE), "--limit", str(limit)]
    return [*argv, "--out", str(out), "--base-url", server.base_url, "--model", "fake", "--api-key", "x", *extra]


class Hostile(Oracle):
    """The oracle, except that some cases get a text answer full of markup."""

    def __init__(self, cases: list[Case], outputs: dict[str, Output], hostile: set[str]) -> None:
        super().__init__(cases, outputs)
        self.hostile = hostile

    def __call__(self, request: dict[str, Any]) -> ReplySpec:
        spec = super().__call__(request)
        if self.asked and self.asked[-1] in self.hostile:
            return text(f"I refuse. {HOSTILE}")
        return spec


def _cases(limit: int) -> list[Case]:
    return load(SIMPLE)[:limit] + load(IRRELEVANCE)[:limit]


def _outputs(cases: list[Case]) -> dict[str, Output]:
    return {c.id: oracle_output(c) if c.ground_truth is not None else None for c in cases}


def test_report_html_compare_and_the_browser(tmp_path: Path) -> None:
    cases = _cases(4)
    simple = [c for c in cases if c.category == "simple_python"]
    first = _outputs(cases)
    first[simple[1].id] = [(simple[1].functions[0]["name"], "{}")]  # a missing argument: refused by the schema gate
    bad_arg = json.dumps({"</pre><b>x</b>": HOSTILE})
    first[simple[2].id] = [(simple[2].functions[0]["name"], bad_arg)]  # refused by the schema gate
    hostile = {simple[3].id}  # answered with markup as text: a mistake
    a, b = tmp_path / "a", tmp_path / "b"
    with FakeServer(Hostile(cases, first, hostile)) as server:
        done = subprocess.run(_argv(server, a, 4), capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"report:  {a / 'report.html'}" in done.stdout
    assert "\r" not in done.stderr and "ETA" not in done.stderr  # not a terminal: no progress bar

    second = _outputs(cases)  # run B: the missing argument fixed, the irrelevance case 0 broken
    second[simple[2].id] = first[simple[2].id]
    irrelevant = next(c for c in cases if c.category == "irrelevance")
    second[irrelevant.id] = [(irrelevant.functions[0]["name"], "{}")]
    with FakeServer(Hostile(cases, second, hostile)) as server:
        done = subprocess.run(_argv(server, b, 4), capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr

    compare = [sys.executable, "-m", "tether", "eval", "compare"]
    shown = subprocess.run([*compare, str(a), str(b / "results.jsonl")], capture_output=True, text=True, env=_env())
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any(simple[1].id in line and "fixed" in line and "refused" in line for line in lines), shown.stdout
    assert any(irrelevant.id in line and "broken" in line for line in lines), shown.stdout
    assert not any(simple[2].id in line for line in lines)  # refused in both runs: unchanged
    assert "2 case(s) changed: 1 fixed, 1 broken" in shown.stdout
    assert "simple_python: accuracy 25.0% -> 50.0%" in shown.stdout
    as_json = subprocess.run([*compare, str(a), str(b), "--json"], capture_output=True, text=True, env=_env())
    document = json.loads(as_json.stdout)
    assert {(c["id"], c["change"], c["before"], c["after"]) for c in document["changes"]} == {
        (simple[1].id, "fixed", "refused", "passed"),
        (irrelevant.id, "broken", "passed", "refused"),
    }
    assert document["accuracy"]["irrelevance"] == {"a": 1.0, "b": 0.75}
    same = subprocess.run([*compare, str(a), str(a)], capture_output=True, text=True, env=_env())
    assert same.stdout.startswith("no case changed verdict")
    missing = subprocess.run([*compare, str(a), str(tmp_path / "nope")], capture_output=True, text=True, env=_env())
    assert missing.returncode == 3 and "no results at" in missing.stderr and "Traceback" not in missing.stderr

    page = (a / "report.html").read_text()
    assert "<script" not in page and "<img" not in page and "&lt;script&gt;" in page
    assert "http://" not in page and "https://" not in page  # self-contained
    _open_in_browser(a / "report.html", simple[2].id, "simple_python=25.0%,irrelevance=100.0%,total=62.5%", tmp_path)


def _open_in_browser(report: Path, failing: str, rows: str, tmp_path: Path) -> None:
    require_browser("eval report in the browser")
    env = {**os.environ, "FAILING_CASE": failing, "EXPECT_ROWS": rows, "SCREENSHOT_DIR": str(tmp_path / "shots")}
    env["CHROMIUM_PATH"] = str(CHROMIUM)
    argv = ["node", str(E2E / "eval_report.mjs"), str(report)]
    proc = subprocess.run(argv, cwd=E2E, env=env, capture_output=True, text=True, timeout=120)
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0, f"eval_report.mjs failed:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.rstrip().endswith("ok")


def test_a_terminal_gets_a_progress_bar(tmp_path: Path) -> None:
    cases = load(SIMPLE)[:12]
    with FakeServer(Oracle(cases, _outputs(cases)), latency=0.1) as server:
        controller, terminal = pty.openpty()
        proc = subprocess.Popen(
            [arg for arg in _argv(server, tmp_path, 12, "--concurrency", "2") if arg != str(IRRELEVANCE)],
            stdout=subprocess.PIPE,
            stderr=terminal,
            env=_env(),
        )
        os.close(terminal)
        seen = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(controller, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        proc.wait(timeout=30)
        os.close(controller)
    assert proc.returncode == 0
    drawn = seen.decode()
    assert "\r" in drawn and "ETA" in drawn and "cases/s" in drawn
    assert "12/12  accuracy 100.0%" in drawn
    assert any(f" {n:>2}/12" in drawn for n in range(1, 12))  # drawn while running, not only at the end


def test_the_report_escapes_everything_it_shows() -> None:
    result = CaseResult(
        id='x"><script>1</script>',
        category="<b>cat</b>",
        outcome="mistake",
        reason="<i>why</i>",
        calls=[{"tool": "<t>", "arguments": '{"a": "<img src=x>"}', "gate": "accepted", "message": ""}],
        content="<script>alert(1)</script>",
        prompt=[{"role": "user", "content": "<iframe src=//evil>"}],
        expected=[{"<f>": {"a": ["</pre>"]}}],
    )
    page = html_report([result], title="<title>")
    for raw in ("<script>", "<b>cat", "<i>why", "<t>", "<img", "<iframe", '</pre>"', "<title><"):
        assert raw not in page, raw
    assert page.count("<script") == 0 and "&lt;iframe src=//evil&gt;" in page
