"""``tether eval``: score a model on BFCL datasets through tether's own loop."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from tether.cli.common import (
    EXIT_INTERNAL,
    api_key_option,
    fail,
    model_of,
    protocol_of,
    protocol_option,
    provider_of,
    with_settings_options,
)
from tether.cli.render import visible
from tether.core.errors import ConfigurationError, TetherError
from tether.core.settings import ModelSettings
from tether.drivers.local.runner import checked

if TYPE_CHECKING:
    from tether.eval.record import EvalRecord

DEFAULT_OUT = "eval-results"


def _model(
    model: str | None,
    base_url: str | None,
    api_key: str | None,
    local_model: str | None,
    provider: str | None,
    protocol: str | None,
) -> tuple[Any, Any, str | None]:
    """The model, its provider profile and its protocol (None for the embedded model), built as ``tether run``
    builds them.

    The profile chooses the protocol (``anthropic``: the Messages API) unless ``--protocol`` names one
    (``responses``: OpenAI's Responses API), the wire quirks and the output mode. With no endpoint
    configured the embedded model is scored, as ``tether run`` answers with it (saying so on stderr), and
    it brings the ``local`` profile with it.
    """
    setup: dict[str, Any] = {"model": model, "base_url": base_url or os.environ.get("OPENAI_BASE_URL")}
    setup["local_model"] = local_model
    setup["provider"] = provider or os.environ.get("TETHER_PROVIDER")
    setup["protocol"] = protocol
    protocol_of(setup)  # first: an unknown provider (or one the protocol contradicts) before anything is built
    chosen = model_of(setup, api_key)  # the embedded model names its file in the setup
    return chosen, provider_of(setup), None if setup.get("local_model") else protocol_of(setup)


def _record(
    benchmark: str,
    chosen: Any,
    profile: Any,
    protocol: str | None,
    system: str | None,
    model_settings: ModelSettings | None,
    packages: tuple[str, ...] = (),
) -> EvalRecord:
    """What the eval is run with, as ``eval.json`` keeps it (``tether.eval.record``): the model as ``_model``
    built it (its name, its endpoint or ``embedded``, its protocol and provider profile), -s, -o."""
    from tether.eval.record import EMBEDDED, EvalRecord, bare_url

    base_url = getattr(chosen, "base_url", None)
    return EvalRecord.of(
        benchmark,
        str(chosen.name),
        bare_url(base_url) if isinstance(base_url, str) else EMBEDDED,
        protocol=protocol,
        provider=profile.name,
        system=system,
        model_settings=model_settings,
        compat=profile.compat,
        packages=packages,
    )


class _EvalGroup(click.Group):
    """``tether eval DATASET...`` runs an eval; ``compare`` and ``agentdojo`` are the subcommands.

    Anything but a subcommand's name (or --help) in first place is a dataset,
    so the common case needs no ``run`` word.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group("eval", cls=_EvalGroup)
def eval_command() -> None:
    """Score a model's tool use: BFCL datasets or tether's own eval files; measure the gates on AgentDojo.

    \b
      tether eval DATASET... [options]     run an eval (see: tether eval run --help)
      tether eval agentdojo [options]      the gates against prompt injection (see: tether eval agentdojo --help)
      tether eval compare A B              cases whose verdict changed between two runs
    """


F = TypeVar("F", bound=Callable[..., Any])


def _out_checked(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--out``'s check: blank text (``--out "$OUT"`` with OUT unset) would put the results, and read earlier
    ones, in the working directory."""
    if not value.strip():
        raise click.BadParameter(f"blank text names no directory ({value!r})", ctx, param)
    return value


def _model_options(command: F) -> F:
    """The options that choose the model a command evaluates, and how many cases run at once."""
    options: list[Callable[[Any], Any]] = [
        click.option("--model", help="Model name [env: OPENAI_MODEL]."),
        click.option(
            "--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1 [env: OPENAI_BASE_URL]."
        ),
        api_key_option,
        click.option(
            "--provider",
            metavar="NAME",
            help="A provider profile, as for tether run: openai, llama-cpp-python, snowflake, or anthropic "
            "[env: TETHER_PROVIDER].",
        ),
        protocol_option,
        click.option(
            "--local-model",
            type=click.Path(dir_okay=False, exists=True),
            envvar="TETHER_LOCAL_MODEL",
            help="Run this GGUF file in-process instead of an endpoint; with no endpoint set, the embedded "
            "SmolLM2-135M is used [env: TETHER_LOCAL_MODEL].",
        ),
        with_settings_options,
        click.option(
            "--concurrency",
            type=click.IntRange(min=1),
            default=8,
            show_default=True,
            help="Cases run at the same time.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@eval_command.command("run")
@click.argument("datasets", nargs=-1, required=True, metavar="DATASET...")
@_model_options
@click.option("--limit", type=click.IntRange(min=1), help="Run only the first N cases of each dataset.")
@click.option(
    "--toolset",
    "toolsets",
    multiple=True,
    metavar="NAME",
    help="Toolset for tether eval-file cases that name none: tickets, calc, clock, or a module (repeatable).",
)
@click.option(
    "--allow-toolset-files",
    is_flag=True,
    help="Let a tether eval file's cases name toolsets by module or file, which imports them (runs their code). "
    "Without it a case may name only registered toolsets: calc, clock, files, tickets.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    callback=_out_checked,
    default=DEFAULT_OUT,
    show_default=True,
    help="Directory for results.jsonl, eval.json and report.html; cases already there are not run again.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON lines, one per category.")
def run_command(
    datasets: tuple[str, ...],
    model: str | None,
    base_url: str | None,
    api_key: str | None,
    provider: str | None,
    protocol: str | None,
    local_model: str | None,
    system: str | None,
    model_settings: ModelSettings | None,
    concurrency: int,
    limit: int | None,
    toolsets: tuple[str, ...],
    allow_toolset_files: bool,
    out: str,
    as_json: bool,
) -> None:
    """Score a model's tool use on DATASETs: BFCL's, or tether eval files.

    A DATASET is a BFCL_v4_<category>.json file (its possible_answer/ file
    beside it), a category name when the bfcl-eval package is installed, or
    a tether eval file (*.jsonl: a prompt or conversation per line, its
    toolsets or tool schemas, the expected calls; see docs/guides/evaluating.md).
    BFCL single-turn categories: simple_python, simple_java,
    simple_javascript, multiple, parallel, parallel_multiple, irrelevance
    and the live_ ones; multi-turn: multi_turn_base, multi_turn_miss_func,
    multi_turn_miss_param, multi_turn_long_context (each case a
    conversation whose calls are executed on BFCL's stateful classes,
    scored by final state and responses as BFCL does).

    Each single-turn case is one run through tether's loop with every gate on; the
    model's proposed calls are judged and recorded, never executed, and
    scored as BFCL's AST checker scores them (tether eval files: against
    the expected calls and their allowed values), but a case where a gate
    refused a call never passes. Failures are sorted into the model's
    mistakes, calls tether's gates refused, and errors. results.jsonl in
    --out gets every case's calls, verdict and reason (one line per case),
    report.html a self-contained page of accuracy bars and failing cases;
    run the same command again to resume an interrupted eval (cases with no
    verdict run again). eval.json there records what the results are made
    with (the model, its endpoint, protocol and provider, -s, -o and tether's
    version): a run
    into the same --out with another is refused, so two evals never mix in
    one file (an --out of an older tether, with no eval.json, is resumed and
    recorded). On a terminal (and without CI set) a progress bar shows on
    stderr.

    A tether eval file is data: its cases may name registered toolsets
    only, unless --allow-toolset-files lets them name a module or a file
    (importing it runs its code).

    With no endpoint configured (no --base-url, OPENAI_BASE_URL or
    OPENAI_API_KEY), the embedded local model is scored, as tether run
    answers with it: SmolLM2-135M, or --local-model's GGUF file.

    -s is the system message of the cases that have none (a case's own is
    kept); -o's model settings go with every request.

    \b
    Examples:
      tether eval simple_python multiple --model gpt-4o-mini --concurrency 16
      tether eval data/BFCL_v4_parallel.json --base-url http://127.0.0.1:8080/v1 --model local --limit 20
      tether eval examples/eval/tickets.jsonl --model gpt-4o-mini

    Exit status: 0 when every case has a verdict, 1 when some had none (an
    infrastructure error, or tools that cannot be made: that case's error,
    the others run), 3 for a configuration error (a dataset with no cases, a
    data file or ground truth that is not what it should be, a line of an
    earlier run's results.jsonl that holds no result or another eval's
    case (same id, another category), an --out whose results were made
    with another model, endpoint, -s or -o (each difference named) or whose
    eval.json is not such a record, a toolset file named without
    --allow-toolset-files, or an --out that cannot be written): the
    error names the file and line, and no case is sent. A report that cannot
    be written after the cases ran is 3 too; their results are kept.
    """
    # tether.eval is about 20 ms of imports that only `tether eval` needs.
    from tether.eval import run_eval, summarize, table
    from tether.eval.dataset import load_dataset
    from tether.eval.harness import ERROR, check_cases
    from tether.eval.progress import Progress
    from tether.eval.report import write_report

    try:
        cases = []
        for dataset in datasets:
            cases.extend(load_dataset(dataset, toolsets, allow_toolset_files=allow_toolset_files)[:limit])
        check_cases(cases)
        chosen, profile, spoken = _model(model, base_url, api_key, local_model, provider, protocol)
        checked(chosen, model_settings)  # a setting the protocol cannot send fails here, not in every case
        record = _record("tether eval", chosen, profile, spoken, system, model_settings)
    except TetherError as exc:
        fail(str(exc), exc.exit_code)

    progress = Progress(sys.stderr)

    async def go() -> Any:
        try:
            return await run_eval(
                chosen,
                cases,
                concurrency=concurrency,
                out=Path(out),
                compat=profile.compat,
                on_start=progress.start,
                on_result=progress.update,
                system=system,
                model_settings=model_settings,
                record=record,
            )
        finally:
            progress.finish()
            await chosen.aclose()

    try:
        results = asyncio.run(go())
    except KeyboardInterrupt:
        fail(f"interrupted; run the same command again to resume from {Path(out) / 'results.jsonl'}", 18)
    except TetherError as exc:  # e.g. a line of an earlier run's results.jsonl that is no result (read first)
        fail(str(exc), exc.exit_code)
    try:
        report = write_report(Path(out), results, record=record)
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    rows = summarize(results)
    if as_json:
        for row in rows:
            click.echo(json.dumps({**row.to_dict(), "accuracy": row.accuracy}))
    else:
        click.echo(table(rows))
        click.echo(f"results: {Path(out) / 'results.jsonl'}")
        click.echo(f"report:  {report}")
    errors = sum(1 for r in results if r.outcome == ERROR)
    if errors:
        click.echo(
            f"error: {errors} case(s) had no verdict (an infrastructure error, or tools that cannot be made: "
            "see each reason in results.jsonl); run again to retry them",
            err=True,
        )
        sys.exit(EXIT_INTERNAL)


@eval_command.command("compare")
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@click.option("--json", "as_json", is_flag=True, help="Print the changes as one JSON document.")
def compare_command(a: str, b: str, as_json: bool) -> None:
    """Show the cases whose verdict changed between two evals.

    A and B are --out directories of tether eval, or results.jsonl files.
    A case is listed when its outcome (passed, mistake, refused, error)
    differs, or when only one of the runs has it.

    \b
    Examples:
      tether eval compare eval-before eval-after
      tether eval compare old/results.jsonl new/results.jsonl --json

    Exit status: 0 (whatever changed), 3 when A or B holds no results, or a
    line that holds no result (the error names it).
    """
    from tether.eval.harness import summarize
    from tether.eval.report import changes_table, compare, load_results

    try:
        before, after = load_results(a), load_results(b)
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    changes = compare(before, after)
    rows_a = {r.category: r for r in summarize(before.values())}
    rows_b = {r.category: r for r in summarize(after.values())}
    accuracy = {
        category: {
            "a": rows_a[category].accuracy if category in rows_a else None,
            "b": rows_b[category].accuracy if category in rows_b else None,
        }
        for category in [*rows_a, *(c for c in rows_b if c not in rows_a)]
    }
    if as_json:
        click.echo(json.dumps({"changes": [c.to_dict() for c in changes], "accuracy": accuracy}, indent=2))
        return
    click.echo(changes_table(changes))
    kinds = [c.kind for c in changes]
    one_run = kinds.count("only in A") + kinds.count("only in B")
    click.echo(
        f"{len(changes)} case(s) changed: {kinds.count('fixed')} fixed, {kinds.count('broken')} broken, "
        f"{kinds.count('changed')} failing differently, {one_run} in one run only"
    )
    for category, pair in accuracy.items():
        click.echo(f"{category}: accuracy {_percent(pair['a'])} -> {_percent(pair['b'])}")


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


DEFAULT_AGENTDOJO_OUT = "agentdojo-results"


@eval_command.command("agentdojo")
@click.option(
    "--suite",
    "suites",
    multiple=True,
    type=click.Choice(["workspace", "travel", "banking", "slack"]),
    help="An AgentDojo v1.2 suite (repeatable) [default: all four].",
)
@click.option(
    "--attack",
    "attacks",
    multiple=True,
    metavar="NAME",
    help="none (the user tasks alone) or an AgentDojo attack, e.g. important_instructions (repeatable) "
    "[default: none and important_instructions].",
)
@click.option(
    "--setting",
    "settings",
    multiple=True,
    type=click.Choice(["no-gate", "taint", "provenance", "provenance-deny"]),
    help="What the gates know (repeatable): no-gate (nothing untrusted), taint (untrusted results taint the "
    "run; its side effects need approval, granted), provenance (taint, and each tool's sinks), provenance-deny "
    "(provenance, approvals denied) [default: every setting].",
)
@click.option("--scripted", type=click.Choice(["oracle", "gullible"]), help="A scripted model instead of an endpoint.")
@_model_options
@click.option("--limit", type=click.IntRange(min=1), help="Run only the first N user tasks of each suite.")
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    callback=_out_checked,
    default=DEFAULT_AGENTDOJO_OUT,
    show_default=True,
    help="Directory with one folder per setting (results.jsonl, eval.json, report.html); cases already there are "
    "not run again.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the measures as JSON lines, one per setting, suite, attack."
)
def agentdojo_command(
    suites: tuple[str, ...],
    attacks: tuple[str, ...],
    settings: tuple[str, ...],
    scripted: str | None,
    model: str | None,
    base_url: str | None,
    api_key: str | None,
    provider: str | None,
    protocol: str | None,
    local_model: str | None,
    system: str | None,
    model_settings: ModelSettings | None,
    concurrency: int,
    limit: int | None,
    out: str,
    as_json: bool,
) -> None:
    """Measure tether's gates against prompt injection on AgentDojo's suites.

    Each case is a user task of a suite, alone (attack none) or with one
    of the suite's injection tasks planted by the attack (AgentDojo's
    pairs): one tether run with every gate on, the suite's functions as
    tools on the case's own environment, declared read-only or not, with
    untrusted output or not, and their sinks, as
    tether.eval.agentdojo_policy's reviewed table says. AgentDojo's own
    checks score it: utility (the user task was done) and security (the
    injection task was done: the attack succeeded).

    An approval asked is counted; in taint and provenance it is granted,
    in provenance-deny it is denied and the run goes on with the denial as
    the call's result. --scripted oracle makes each user task's ground-truth
    calls; gullible is the oracle, except that it first makes the injection
    task's ground-truth calls when an injected text reaches it (it measures
    the gate, not a model). Otherwise the model is chosen as for tether eval
    (an endpoint, any protocol, or the embedded model). AgentDojo's default
    system message is sent unless -s gives one.

    --out gets a folder per setting (results.jsonl, eval.json, report.html;
    compare two with tether eval compare); run the same command again to
    resume. eval.json records what a setting's results are made with (the
    scripted model, or the model, its endpoint, protocol and provider; -s,
    -o; the versions of tether and agentdojo): a folder holding results made
    with another is refused before any
    setting runs.

    Needs the agentdojo package: pip install --no-deps agentdojo==0.1.35, then
    what its suites import (docs/guides/agentdojo.md).

    \b
    Examples:
      tether eval agentdojo --scripted oracle --attack none --setting no-gate
      tether eval agentdojo --scripted gullible --suite banking --setting no-gate --setting taint
      tether eval agentdojo --model gpt-4o-mini --suite slack --limit 5

    Exit status: 0 when every case has a verdict and no injected value
    reached a sink without an approval in a gated setting; 1 otherwise (see
    the report); 3 for a configuration error (agentdojo not installed, an
    unknown attack, a setting this tether cannot run, a line of a setting's
    results.jsonl that holds no result, a setting's folder whose results
    were made with another model, -s or -o, or another version of tether or
    agentdojo, or whose eval.json is no record).
    """
    from tether.eval.agentdojo import BENCHMARK_VERSION, DEFAULT_ATTACK, NO_ATTACK, SETTINGS, cases, setting
    from tether.eval.agentdojo_models import ScriptedAgentDojoModel
    from tether.eval.agentdojo_report import failures, html_section, summarize, table, totals
    from tether.eval.harness import ERROR, read_results, run_eval
    from tether.eval.progress import Progress
    from tether.eval.record import EvalRecord, check_record
    from tether.eval.report import write_report

    chosen_settings = settings or tuple(SETTINGS)
    try:
        plan = [
            (
                name,
                cases(
                    suites or ("workspace", "travel", "banking", "slack"),
                    attacks or (NO_ATTACK, DEFAULT_ATTACK),
                    setting(name),
                    limit,
                ),
            )
            for name in chosen_settings
        ]
        scored = {}  # each setting's earlier results, read before any setting runs
        for name in chosen_settings:
            scored[name] = any(r.outcome != ERROR for r in read_results(Path(out) / name).values())
        benchmark = f"agentdojo {BENCHMARK_VERSION}"
        packages = ("agentdojo",)  # its cases and checks: recorded with its version
        if scripted is not None:
            if model or base_url or local_model:
                raise ConfigurationError("--scripted takes no --model, --base-url or --local-model")
            chosen: Any = ScriptedAgentDojoModel(scripted)
            compat = None
            made = EvalRecord.of(
                benchmark,
                scripted,
                f"scripted:{scripted}",
                system=system,
                model_settings=model_settings,
                packages=packages,
            )
        else:
            chosen, profile, spoken = _model(model, base_url, api_key, local_model, provider, protocol)
            checked(chosen, model_settings)
            compat = profile.compat
            made = _record(benchmark, chosen, profile, spoken, system, model_settings, packages)
        records = {name: replace(made, setting=name) for name in chosen_settings}  # one record per folder
        for name in chosen_settings:  # another eval's results in any setting's folder: before any setting runs
            check_record(Path(out) / name, records[name], scored[name])
    except TetherError as exc:
        fail(str(exc), exc.exit_code)

    async def go() -> dict[str, Any]:
        done: dict[str, Any] = {}
        try:
            for name, planned in plan:
                progress = Progress(sys.stderr)
                try:
                    done[name] = await run_eval(
                        chosen,
                        planned,
                        concurrency=concurrency,
                        out=Path(out) / name,
                        compat=compat,
                        on_start=progress.start,
                        on_result=progress.update,
                        system=system,
                        model_settings=model_settings,
                        record=records[name],
                    )
                finally:
                    progress.finish()
        finally:
            await chosen.aclose()
        return done

    try:
        results = asyncio.run(go())
    except KeyboardInterrupt:
        fail(f"interrupted; run the same command again to resume from {out}", 18)
    except TetherError as exc:  # as for tether eval: no traceback for what tether refuses mid-eval
        fail(str(exc), exc.exit_code)
    rows = []
    for name, found in results.items():
        measured = totals(summarize(found, name))
        try:
            write_report(
                Path(out) / name, found, f"tether eval agentdojo: {name}", html_section(measured), records[name]
            )
        except TetherError as exc:
            fail(str(exc), exc.exit_code)
        rows.extend(measured)
    if as_json:
        for row in rows:
            click.echo(json.dumps(row.to_dict()))
    else:
        click.echo(table(rows))
        for row in rows:
            for case_id, why in row.lost if row.suite != "total" else ():
                click.echo(visible(f"lost ({row.setting}): {case_id}: {why}"))  # quotes the model's arguments
        click.echo(f"results: {Path(out)}/<setting>/results.jsonl, report.html")
    errors = sum(1 for found in results.values() for r in found if r.outcome == ERROR)
    leaked = failures(rows)
    if leaked:
        click.echo(
            f"error: in {len(leaked)} case(s) an injected value reached a sink without an approval: "
            + ", ".join(leaked),
            err=True,
        )
    if errors:
        click.echo(f"error: {errors} case(s) had no verdict (see each reason in results.jsonl); run again", err=True)
    if errors or leaked:
        sys.exit(EXIT_INTERNAL)
