"""What an eval leaves to read: a self-contained HTML report, and the comparison of two runs.

``html_report(results)`` is one page with no external asset (inline CSS, no
script): a bar per category for its accuracy, then every case that did not
pass, each a ``<details>`` that opens on the conversation, the expected
calls, the calls the model proposed (a multi-turn case's turn by turn, each
call with its step, the gate's verdict and whether it ran) and the reason. Everything shown comes
from ``results.jsonl`` and is escaped: model output is untrusted text.

``compare(a, b)`` lines up two runs' results case by case and lists the cases
whose verdict changed (passed → failed, failed → passed, or a different kind
of failure), and the cases only one run has.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from tether.core.errors import ConfigurationError, DatasetError
from tether.eval.harness import PASSED, RESULTS_FILE, CaseResult, Row, read_results_file, summarize
from tether.eval.record import EvalRecord

REPORT_FILE = "report.html"

_CSS = """
body{font:15px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:70rem;padding:0 1rem;color:#1d232a}
h1{font-size:1.4rem}h2{font-size:1.15rem;margin-top:2rem}
table{border-collapse:collapse;width:100%}td,th{padding:.3rem .5rem;text-align:left;border-bottom:1px solid #e3e6ea}
.num{text-align:right;font-variant-numeric:tabular-nums}
.track{background:#f0d7d7;border-radius:3px;height:1rem;min-width:12rem;position:relative}
.fill{background:#2f8a4c;border-radius:3px;height:100%}
details{border:1px solid #d8dde3;border-radius:4px;margin:.4rem 0;padding:.3rem .6rem}
summary{cursor:pointer}summary code{font-weight:600}
.outcome{display:inline-block;border-radius:3px;padding:0 .35rem;font-size:.85em;color:#fff;background:#a33}
.outcome.refused{background:#b26b00}.outcome.error{background:#555}
pre{background:#f6f8fa;padding:.5rem;overflow:auto;white-space:pre-wrap;word-break:break-word}
.muted{color:#66707a}
"""


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _bar_rows(rows: Sequence[Row]) -> str:
    out = []
    for row in rows:
        width = 0.0 if row.accuracy is None else 100 * row.accuracy
        out.append(
            f'<tr data-testid="category-row" data-category="{escape(row.category)}">'
            f"<td>{escape(row.category)}</td>"
            f'<td><div class="track" data-testid="accuracy-bar" title="{_percent(row.accuracy)}">'
            f'<div class="fill" style="width:{width:.1f}%"></div></div></td>'
            f'<td class="num" data-testid="accuracy">{_percent(row.accuracy)}</td>'
            f'<td class="num">{row.passed}/{row.cases}</td><td class="num">{row.mistakes}</td>'
            f'<td class="num">{row.refused}</td><td class="num">{row.errors}</td></tr>'
        )
    return "\n".join(out)


def _pretty(value: Any) -> str:
    return escape(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def _conversation(prompt: Sequence[dict[str, Any]]) -> str:
    if not prompt:
        return '<p class="muted">(not recorded)</p>'
    parts = []
    for message in prompt:
        role = escape(str(message.get("role", "?")))
        text = message.get("content")
        body = escape(str(text)) if text is not None else ""
        if message.get("tool_calls"):
            body += ("\n" if body else "") + _pretty(message["tool_calls"])
        parts.append(f"<pre><b>{role}</b>: {body}</pre>")
    return "\n".join(parts)


def _turns(result: CaseResult) -> str:
    """A multi-turn case's calls, turn by turn: each call with its step, gate and whether it ran."""
    parts = []
    turns = {int(c["turn"]) for c in result.calls} | {int(m["turn"]) for m in result.prompt if "turn" in m}
    for turn in sorted(turns):
        calls = [
            {k: c.get(k) for k in ("step", "tool", "arguments", "gate", "message", "executed")}
            for c in result.calls
            if c["turn"] == turn
        ]
        shown = _pretty(calls) if calls else "no call"
        parts.append(f'<h4 data-testid="turn">Turn {turn + 1}</h4><pre>{shown}</pre>')
    if result.content:
        parts.append(f"<pre>{escape('last answer: ' + str(result.content))}</pre>")
    return "\n".join(parts)


def _calls(result: CaseResult) -> str:
    if any("turn" in item for item in (*result.calls, *result.prompt)):  # a multi-turn case, calls or not
        return _turns(result)
    if not result.calls:
        said = f"no call; the model answered: {result.content}" if result.content else "no call"
        return f"<pre>{escape(said)}</pre>"
    return f"<pre>{_pretty(result.calls)}</pre>"


def _failure(result: CaseResult) -> str:
    expected = result.expected if result.expected not in (None, []) else "no call expected"
    return (
        f'<details data-testid="failing-case" data-case="{escape(result.id)}">'
        f'<summary><code>{escape(result.id)}</code> <span class="outcome {escape(result.outcome)}">'
        f"{escape(result.outcome)}</span> {escape(result.category)} — "
        f'<span data-testid="reason">{escape(result.reason or "-")}</span></summary>'
        f"<h3>Conversation</h3>{_conversation(result.prompt)}"
        f'<h3>Expected</h3><pre data-testid="expected">{_pretty(expected)}</pre>'
        f'<h3>Proposed</h3><div data-testid="actual">{_calls(result)}</div>'
        f"<h3>Reason</h3><pre>{escape(result.reason or '-')}</pre>"
        "</details>"
    )


def _made_with(record: EvalRecord | None) -> str:
    """The line saying what the results were made with (``eval.json``), or nothing."""
    if record is None:
        return ""
    host = record.endpoint.partition("://")[2]  # no link: the page fetches nothing
    where = f"at <code>{escape(host)}</code>" if host else f"(<code>{escape(record.endpoint)}</code>)"
    said = [f"<code>{escape(record.model)}</code> {where}"]
    said += [f"protocol <code>{escape(record.protocol)}</code>"] if record.protocol else []
    said += [f"provider <code>{escape(record.provider)}</code>"] if record.provider else []
    said += [f"system message <code>{escape(record.system)}</code>"] if record.system is not None else []
    if record.model_settings is not None:
        said.append(f"model settings <code>{escape(json.dumps(record.model_settings, ensure_ascii=False))}</code>")
    made_by = f" Made with {escape(', '.join(record.versions))}." if record.versions else ""
    return f'<p data-testid="eval-record">Model: {", ".join(said)}.{made_by}</p>'


def html_report(
    results: Iterable[CaseResult], title: str = "tether eval", section: str = "", record: EvalRecord | None = None
) -> str:
    """The whole report as one HTML document; ``section`` (HTML, escaped by its maker) goes after the summary,
    what ``record`` says of the model before it."""
    results = list(results)
    rows = summarize(results)
    failing = [r for r in results if r.outcome != PASSED]
    failures = "\n".join(_failure(r) for r in failing) or '<p data-testid="no-failures">Every case passed.</p>'
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>{escape(title)}</title><style>{_CSS}</style></head>
<body>
<h1>{escape(title)}</h1>
{_made_with(record)}
<p>{len(results)} case(s). Accuracy leaves infrastructure errors out. <i>mistakes</i>: the model's;
<i>refused</i>: a gate refused a call or the reply; <i>errors</i>: no verdict (see the reason).</p>
<table data-testid="summary"><thead><tr><th>category</th><th>accuracy</th><th></th><th class="num">passed</th>
<th class="num">mistakes</th><th class="num">refused</th><th class="num">errors</th></tr></thead>
<tbody>
{_bar_rows(rows)}
</tbody></table>
{section}
<h2>Cases that did not pass ({len(failing)})</h2>
{failures}
</body></html>
"""


def write_report(
    out: Path,
    results: Iterable[CaseResult],
    title: str = "tether eval",
    section: str = "",
    record: EvalRecord | None = None,
) -> Path:
    """Write ``out/report.html`` (``record``: what the results were made with, shown under the title); a path
    that cannot be written is a ``ConfigurationError`` naming it (the results are in ``results.jsonl``
    already: the same command run again writes the report)."""
    path = out / REPORT_FILE
    try:
        path.write_text(html_report(results, title, section, record), encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(
            f"cannot write {path}: {exc.strerror}; the results are in {out / RESULTS_FILE}, "
            "and the same command run again writes the report"
        ) from None
    return path


# ---------------------------------------------------------------- comparing two runs


@dataclass(frozen=True, slots=True)
class Change:
    """One case whose verdict differs between run A and run B (None: the run has no such case)."""

    id: str
    category: str
    before: str | None
    after: str | None
    reason_before: str
    reason_after: str

    @property
    def kind(self) -> str:
        if self.before is None:
            return "only in B"
        if self.after is None:
            return "only in A"
        if self.after == PASSED:
            return "fixed"
        if self.before == PASSED:
            return "broken"
        return "changed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "category": self.category,
            "change": self.kind,
            "before": self.before,
            "after": self.after,
            "reason_before": self.reason_before,
            "reason_after": self.reason_after,
        }


def load_results(place: str | Path) -> dict[str, CaseResult]:
    """An eval's results: an ``--out`` directory or a results.jsonl file; a line that holds none, or a file
    with no result in it, is a ``DatasetError``."""
    path = Path(place)
    if path.is_dir():
        if not (path / RESULTS_FILE).is_file():
            raise DatasetError(f"{path} has no {RESULTS_FILE}: is it a tether eval --out directory?")
        path = path / RESULTS_FILE
    elif not path.is_file():
        raise DatasetError(f"no results at {path}: give an --out directory or a results.jsonl file")
    found = read_results_file(path)
    if not found:  # empty, blank or one torn line, named either way: nothing to compare
        raise DatasetError(f"{path}: no tether eval results in it")
    return found


def compare(a: dict[str, CaseResult], b: dict[str, CaseResult]) -> list[Change]:
    """Cases whose outcome differs between A and B, in A's order, then those only B has."""
    changes = []
    for case_id in [*a, *(i for i in b if i not in a)]:
        before, after = a.get(case_id), b.get(case_id)
        if before is not None and after is not None and before.outcome == after.outcome:
            continue
        known = after or before
        assert known is not None
        changes.append(
            Change(
                case_id,
                known.category,
                before.outcome if before else None,
                after.outcome if after else None,
                before.reason if before else "",
                after.reason if after else "",
            )
        )
    return changes


def changes_table(changes: Sequence[Change]) -> str:
    """The changes as aligned text, one line per case."""
    if not changes:
        return "no case changed verdict"
    head = ("case", "category", "change", "A", "B", "reason in B")
    body = [(c.id, c.category, c.kind, c.before or "-", c.after or "-", c.reason_after or "-") for c in changes]
    widths = [max(len(x[i]) for x in (head, *body)) for i in range(len(head) - 1)]
    lines = []
    for cells in (head, *body):
        lines.append("  ".join([*(c.ljust(w) for c, w in zip(cells, widths, strict=False)), cells[-1]]).rstrip())
    return "\n".join(lines)
