"""Commands over the run store: list, show, verify, approve, deny, reconcile.

Every command that names a run takes its id, a unique prefix of it, or (four characters or more) a unique end.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from tether.cli.common import db_option, fail, json_option, open_store
from tether.cli.render import arguments_preview, short, visible
from tether.cli.temporal import decide_on_temporal, reconcile_on_temporal, temporal_run_option
from tether.core import nesting
from tether.core.errors import NoStore, StoreError, TetherError
from tether.core.redact import redact, redact_text
from tether.drivers.common import json_object
from tether.drivers.local.durable import MAX_REASON_CHARS, SHOWN_FINGERPRINT, decide, waiting_calls
from tether.drivers.local.durable import reconcile as settle_call
from tether.drivers.local.subagents import MAX_DEPTH
from tether.store.records import omitted
from tether.tools.decoding import finite, no_constants

EXIT_VERIFY_FAILED = 6
PROMPT_SHOWN = 60  # characters of a prompt's first line in `runs list`


def _emit_json(value: Any) -> None:
    click.echo(json.dumps(redact(value), ensure_ascii=False))


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def _bounded_reason(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A decision's reason, refused past ``MAX_REASON_CHARS`` as the service's API refuses it: the model reads it."""
    if value is not None and len(value) > MAX_REASON_CHARS:
        raise click.BadParameter(f"at most {MAX_REASON_CHARS} characters, not {len(value)}")
    return value


@click.group()
def runs() -> None:
    """Inspect recorded runs."""


@runs.command("list")
@db_option
@click.option("--principal", help="Only runs of this principal.")
@click.option("--limit", type=click.IntRange(1, 1_000_000), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON array, one entry per run.")
def list_runs(db: str | None, principal: str | None, limit: int, as_json: bool) -> None:
    """List recent runs, newest first.

    Each line ends with the first line of the run's prompt when the run was
    recorded with --log-content (otherwise its text is not shown). A child
    run (a sub-agent's) is marked with its parent: "child of RUN". A run whose
    row was edited in the database is not listed: stderr names it (see
    tether runs verify).
    """
    nowhere = ""
    skipped: list[tuple[str, StoreError]] = []
    try:
        store = open_store(db, existing=True)
        found = store.list_runs(principal, limit, skipped=skipped)
        prompts = {k: _first_line(redact_text(v)) for k, v in store.logged_prompts([r.run_id for r in found]).items()}
    except NoStore as exc:  # none recorded yet, or a mistyped path: either way no runs, and the path said
        found, prompts, nowhere = [], {}, f": {exc}"
        if as_json:
            click.echo(f"tether: {exc}", err=True)
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    for _, edited in skipped:  # one edited row does not hide the others: it is named, and the rest listed
        click.echo(f"tether: {edited}; not listed", err=True)
    if as_json:
        _emit_json([_summary(r, prompts.get(r.run_id)) for r in found])
        return
    for r in found:
        prompt = f"  {short(prompts[r.run_id], PROMPT_SHOWN)}" if prompts.get(r.run_id) else ""
        turn = f"  conversation {r.conversation_id} turn {r.turn}" if r.conversation_id else ""
        engine = f"  on {r.engine}" if r.engine != "local" else ""
        child = f"  child of {r.parent_id}" if r.parent_id else ""
        line = (
            f"{r.run_id}  {r.status:<24} {r.principal:<12} {r.steps:>3} step(s)  {_when(r.created_at)}"
            f"{engine}{turn}{child}{prompt}"
        )
        click.echo(visible(line))  # the prompt is a caller's words (a served run's, anyone's)
    if not found and not skipped:
        click.echo(f"no runs recorded{nowhere}")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _summary(r: Any, prompt: str | None) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "status": r.status,
        "principal": r.principal,
        "steps": r.steps,
        "created_at": r.created_at,
        "updated_at": r.updated_at,
        "prompt": prompt,
        "conversation_id": r.conversation_id,
        "turn": r.turn,
        "engine": r.engine,
        "parent_id": r.parent_id,
    }


def _describe(kind: str, data: dict[str, Any]) -> str:
    """One readable line for an audit event."""
    call = f"call {data['id']} {data.get('tool', '')}".rstrip() if "id" in data else ""
    if kind == "model_replied":
        if "error" in data:
            return f"model error: {data['error']}"
        by = f" by {data['agent']}" if "agent" in data else ""  # a run with handoffs names who answered
        model = f", by {data['model']}" if data.get("model") else ""  # runs recorded before it was logged have none
        if data.get("skipped"):
            model += f" after {'; '.join(short(str(s), 80) for s in data['skipped'])}"
        calls = f"{data.get('tool_calls', 0)} call(s)"
        return f"model replied{by}: finish_reason={data.get('finish_reason')}, {calls}{model}"
    if kind == "handoff":
        return f"handoff: call {data.get('id')} hands the run from {data.get('from')} to {data.get('to')}"
    if kind in ("call_executed", "call_rejected", "call_recovered"):
        verb = {"call_executed": "executed", "call_rejected": "refused", "call_recovered": "recovered from ledger"}
        return f"{call}: {verb[kind]} -> {data.get('outcome')}"
    if kind == "approval_requested":
        why = f": {data['reason']}" if data.get("reason") else ""  # e.g. which sink value came from where
        return f"{call}: waiting for approval{why}, arguments {arguments_preview(data.get('arguments')) or 'null'}"
    if kind == "approval_decided":
        decision = "approved" if data.get("approved") else "denied"
        reason = f" ({data['reason']})" if data.get("reason") else ""
        return f"{call}: {decision} by {data.get('by')}{reason}"
    if kind == "reconciled":
        what = "executed" if data.get("executed") else "not executed"
        return f"{call}: reconciled by {data.get('by')}: {what}"
    if kind == "child_run":
        return f"{call}: drives child run {data.get('run')}"
    if kind == "reconciliation_needed":
        return f"outcome unknown for call(s) {', '.join(data.get('ids', []))}"
    if kind in ("run_finished", "run_paused", "run_resumed"):
        reason = f" ({data['reason']})" if data.get("reason") else ""
        return f"{kind.replace('_', ' ')}: {data.get('status')}{reason}"
    if kind == "call_validated" and isinstance(data.get("arguments"), dict):
        return f"{call} {arguments_preview(data['arguments'])}: call validated"
    if kind in ("intent_recorded", "outcome_recorded", "call_validated"):
        return f"{call}: {kind.replace('_', ' ')}"
    return kind.replace("_", " ")


@runs.command()
@click.argument("run_id")
@db_option
@json_option
def show(run_id: str, db: str | None, as_json: bool) -> None:
    """Show a run's timeline: steps, calls, outcome codes, approvals, timings.

    Each event is shown at the step it belongs to and the time it happened.
    A run whose calls ran sub-agents shows its tree of child runs (status,
    steps, usage), and the calls its waiting children wait on as its own
    pending calls; a child run names its parent. With --json, also the
    transcript: message text where the run was recorded with --log-content,
    a placeholder such as "<21 chars>" where not. RUN_ID may be a unique
    prefix of the run id.
    """
    try:
        store = open_store(db, existing=True)
        run_id = store.resolve(run_id)
        stored = store.load(run_id, check=False)  # shown as stored; `runs verify` judges it
        events = store.events(run_id)
        children = _tree(store, run_id, events)
        of_children = [(r, p) for r, p in waiting_calls(store, run_id, stored.state) if r != run_id]
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    state = stored.state
    waiting = [p for p in state.pending if p.execute and (p.needs_approval or p.call_id in state.unknown)]
    pending = [
        {"id": p.call_id, "tool": p.tool, "arguments": p.arguments, "fingerprint": p.fingerprint} for p in waiting
    ] + [
        {"id": p.call_id, "tool": p.tool, "arguments": p.arguments, "fingerprint": p.fingerprint, "run_id": r}
        for r, p in of_children
    ]
    if as_json:
        _emit_json(
            {
                "run_id": run_id,
                "status": state.status.value,
                "principal": stored.principal.id,
                "engine": stored.setup.get("engine", "local"),
                "parent_id": stored.parent_id,
                "children": children,
                "output": state.output,
                "reason": state.reason,
                "steps": state.steps,
                "usage": {"input_tokens": state.usage.input_tokens, "output_tokens": state.usage.output_tokens},
                "pending": pending,
                "events": [{"seq": e.seq, "at": e.at, "kind": e.kind, "step": e.step, "data": e.data} for e in events],
                "messages": _transcript(state.messages, bool(stored.setup.get("log_content"))),
                **({"last_agent": state.agent} if state.agent is not None else {}),
            }
        )
        return
    engine = stored.setup.get("engine", "local")
    click.echo(
        f"run {run_id}  {state.status.value}  principal {stored.principal.id}  started {_when(stored.created_at)}"
        + (f"  on {engine}" if engine != "local" else "")
    )
    if stored.parent_id is not None:
        click.echo(f"  child run of run {stored.parent_id}")
    start = events[0].at if events else stored.created_at
    for e in events:
        click.echo(visible(f"  +{e.at - start:8.3f}s  step {e.step}  {_describe(e.kind, redact(e.data))}"))
    _show_tree(children, "  ")
    for call in waiting:
        args = arguments_preview(call.arguments) or "null"
        shown = (call.fingerprint or "")[:SHOWN_FINGERPRINT]
        click.echo(visible(f"  pending: call {call.call_id} {call.tool} {args}  fingerprint {shown}"))
    for child, call in of_children:
        args = arguments_preview(call.arguments) or "null"
        shown = (call.fingerprint or "")[:SHOWN_FINGERPRINT]
        click.echo(
            visible(f"  pending: call {call.call_id} {call.tool} {args}  fingerprint {shown}  in child run {child}")
        )
    if state.output is not None:
        click.echo(visible(f"answer: {state.output}"))


def _tree(store: Any, run_id: str, events: list[Any], depth: int = 0) -> list[dict[str, Any]]:
    """The run's child runs (sub-agents), each with the call that drove it, its status, steps, usage and children."""
    calls = {e.data.get("run"): e.data for e in events if e.kind == "child_run"}
    tree = []
    for child in store.children(run_id):
        usage = child.progress.get("usage", [0, 0])
        call = calls.get(child.run_id, {})
        below = _tree(store, child.run_id, store.events(child.run_id), depth + 1) if depth < MAX_DEPTH else []
        tree.append(
            {
                "run_id": child.run_id,
                "call_id": call.get("id"),
                "tool": call.get("tool"),
                "status": child.status,
                "steps": child.steps,
                "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
                "children": below,
            }
        )
    return tree


def _show_tree(children: list[dict[str, Any]], indent: str) -> None:
    for child in children:
        by = f" (call {child['call_id']} {child['tool']})" if child["call_id"] else ""
        used = child["usage"]
        click.echo(
            visible(
                f"{indent}child run {child['run_id']}{by}: {child['status']}, {child['steps']} step(s), "
                f"{used['input_tokens']} input and {used['output_tokens']} output tokens"
            )
        )  # the call's id is the model's
        _show_tree(child["children"], indent + "  ")


def _transcript(messages: list[Any], logged: bool) -> list[dict[str, Any]]:
    """The run's messages for `runs show --json`; their text only where the run logged content."""
    out = []
    for seq, message in enumerate(messages):
        item: dict[str, Any] = {"seq": seq, "role": message.role}
        if message.content is None or logged:
            item["content"] = message.content
        else:
            item["content"] = omitted(message.content)
        if message.tool_calls:
            item["tool_calls"] = [
                {"id": c.id, "tool": c.name, "arguments": json_object(c.arguments)} for c in message.tool_calls
            ]
        if message.tool_call_id is not None:
            item["tool_call_id"] = message.tool_call_id
        if message.agent is not None:
            item["agent"] = message.agent
        out.append(item)
    return out


@runs.command()
@click.argument("run_id")
@db_option
@json_option
def verify(run_id: str, db: str | None, as_json: bool) -> None:
    """Check a run's audit log: its seal, both hash chains, and the ledger against the events.

    Any row inserted, edited, removed or reordered in what resume reads
    fails. With TETHER_AUDIT_KEY set, the seal is an HMAC under that key,
    which someone without the key cannot recompute; without it, a forger
    who recomputes every hash is not caught. RUN_ID may be a unique prefix
    of the run id. Exit status 0 when intact, 6 when tampered with.
    """
    try:
        store = open_store(db, existing=True)
        run_id = store.resolve(run_id)
        problems = store.verify(run_id)
        counts = store.counts(run_id)
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    if as_json:
        _emit_json({"run_id": run_id, "ok": not problems, "problems": problems})
    elif problems:
        for problem in problems:
            click.echo(f"tampered: {problem}")
    else:
        click.echo(f"run {run_id}: intact ({counts[0]} events, {counts[1]} messages)")
    if problems:
        sys.exit(EXIT_VERIFY_FAILED)


def _decide(
    run_id: str,
    call_id: str,
    approved: bool,
    reason: str | None,
    fingerprint: str | None,
    db: str | None,
    as_json: bool,
) -> None:
    try:
        store = open_store(db, existing=True)
        run_id = store.resolve(run_id)
        call = decide(store, run_id, call_id, approved=approved, reason=reason, fingerprint=fingerprint)
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    word = "approved" if approved else "denied"
    if as_json:
        _emit_json({"run_id": run_id, "call_id": call_id, "tool": call.tool, "decision": word, "reason": reason})
    else:
        click.echo(f"call {call_id} ({call.tool}) {word}; continue with: tether resume {run_id}")


@click.command()
@click.argument("run_id")
@click.argument("call_id")
@click.option(
    "--reason",
    callback=_bounded_reason,
    help=f"Why; recorded in the audit log (at most {MAX_REASON_CHARS} characters).",
)
@click.option("--fingerprint", help="The argument fingerprint you reviewed (from `tether runs show`).")
@db_option
@temporal_run_option
@json_option
def approve(
    run_id: str,
    call_id: str,
    reason: str | None,
    fingerprint: str | None,
    db: str | None,
    temporal_address: str | None,
    as_json: bool,
) -> None:
    """Approve a call waiting in a paused run; `tether resume` then runs it.

    With --temporal the run is a Temporal workflow: the decision is sent as an
    update and the workers carry on (RUN_ID is then the whole run id).
    RUN_ID may be a unique prefix of the run id. Exit status 7 when the run
    has no such pending call or the fingerprint names other arguments.
    """
    if temporal_address:
        decide_on_temporal(
            temporal_address, run_id, call_id, approved=True, reason=reason, fingerprint=fingerprint, as_json=as_json
        )
    _decide(run_id, call_id, True, reason, fingerprint, db, as_json)


@click.command()
@click.argument("run_id")
@click.argument("call_id")
@click.option(
    "--reason",
    callback=_bounded_reason,
    help=f"Why; recorded and shown to the model (at most {MAX_REASON_CHARS} characters).",
)
@db_option
@temporal_run_option
@json_option
def deny(
    run_id: str, call_id: str, reason: str | None, db: str | None, temporal_address: str | None, as_json: bool
) -> None:
    """Deny a call waiting in a paused run; the model is told it was denied.

    With --temporal the decision is sent to the run's workflow as an update.
    RUN_ID may be a unique prefix of the run id. Exit status 7 when the run has
    no such pending call.
    """
    if temporal_address:
        decide_on_temporal(
            temporal_address, run_id, call_id, approved=False, reason=reason, fingerprint=None, as_json=as_json
        )
    _decide(run_id, call_id, False, reason, None, db, as_json)


@click.command()
@click.argument("run_id")
@click.argument("call_id")
@click.option(
    "--executed", "result_json", metavar="RESULT_JSON", help="The call did take effect, with this JSON result."
)
@click.option("--not-executed", is_flag=True, help="The call never took effect; resume may run it.")
@db_option
@temporal_run_option
@json_option
def reconcile(
    run_id: str,
    call_id: str,
    result_json: str | None,
    not_executed: bool,
    db: str | None,
    temporal_address: str | None,
    as_json: bool,
) -> None:
    """Say what became of a call whose outcome is unknown after a crash.

    With --temporal the answer is sent to the run's workflow as an update.
    RUN_ID may be a unique prefix of the run id. Exit status 7 when the run has
    no such call waiting.

    \b
    Examples:
      tether reconcile RUN CALL --executed '{"id": 42}'
      tether reconcile RUN CALL --not-executed
    """
    if (result_json is None) == (not not_executed):
        fail("give exactly one of --executed RESULT_JSON or --not-executed", 2)
    result: Any = None
    if result_json is not None:
        try:
            # NaN and Infinity are no JSON: recorded, they would make the call's result an envelope no reader decodes.
            result = nesting.loads(result_json, nesting.MAX_DEPTH, parse_constant=no_constants, parse_float=finite)
        except ValueError as exc:
            fail(f"--executed takes a JSON value: {exc.args[0]}", 2)
    if temporal_address:
        reconcile_on_temporal(temporal_address, run_id, call_id, result_json, as_json=as_json)
    try:
        store = open_store(db, existing=True)
        run_id = store.resolve(run_id)
        call = settle_call(store, run_id, call_id, executed=result_json is not None, result=result)
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    what = "executed" if result_json is not None else "not executed"
    if as_json:
        _emit_json({"run_id": run_id, "call_id": call_id, "tool": call.tool, "reconciled": what})
    else:
        click.echo(f"call {call_id} ({call.tool}) recorded as {what}; continue with: tether resume {run_id}")


__all__ = ["approve", "deny", "reconcile", "runs"]
