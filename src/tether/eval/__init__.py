"""tether.eval: score a model on the Berkeley Function Calling Leaderboard through tether's own loop.

    cases = load("BFCL_v4_simple_python.json")       # and possible_answer/ beside it
    results = await run_eval(OpenAIChatModel("gpt-4o-mini"), cases, concurrency=8, out=Path("eval-out"))
    print(table(summarize(results)))

Each single-turn case is one ``propose_only`` run (the calls are judged by every gate
and recorded, never executed); ``check`` scores them as BFCL's AST checker
does. ``load_cases`` reads tether's own JSONL format (``tether.eval.dataset``),
scored against the expected calls. BFCL's multi-turn categories
(``tether.eval.multi_turn``) run each case as a conversation whose calls are
executed on BFCL's stateful classes, scored by final state and responses as
BFCL scores them. ``tether.eval.agentdojo`` runs AgentDojo's prompt-injection
suites on their environments, scored by AgentDojo's own checks, to measure
tether's gates. See ``tether.eval.harness`` for how
failures are sorted, ``tether.eval.record`` for eval.json (what the results
were made with: a resumed eval must be run with the same), ``tether.eval.report``
for report.html and comparing runs.
"""

from tether.core.errors import DatasetError
from tether.eval.bfcl import SINGLE_TURN, Case, load
from tether.eval.checker import Verdict, check
from tether.eval.dataset import TetherCase, load_cases, load_dataset
from tether.eval.functions import bfcl_name, parameters_schema, tool_from_document, tool_name
from tether.eval.harness import (
    ERROR,
    MISTAKE,
    PASSED,
    REFUSED,
    RESULTS_FILE,
    CaseResult,
    Row,
    read_results,
    run_case,
    run_eval,
    score,
    summarize,
    table,
)
from tether.eval.multi_turn import MULTI_TURN, MultiTurnCase, check_turns
from tether.eval.record import RECORD_FILE, EvalRecord

__all__ = [
    "ERROR",
    "MISTAKE",
    "MULTI_TURN",
    "PASSED",
    "RECORD_FILE",
    "REFUSED",
    "RESULTS_FILE",
    "SINGLE_TURN",
    "Case",
    "CaseResult",
    "DatasetError",
    "EvalRecord",
    "MultiTurnCase",
    "Row",
    "TetherCase",
    "Verdict",
    "bfcl_name",
    "check",
    "check_turns",
    "load",
    "load_cases",
    "load_dataset",
    "parameters_schema",
    "read_results",
    "run_case",
    "run_eval",
    "score",
    "summarize",
    "table",
    "tool_from_document",
    "tool_name",
]
