"""tether.eval: score a model on the Berkeley Function Calling Leaderboard through tether's own loop.

    cases = load("BFCL_v4_simple_python.json")       # and possible_answer/ beside it
    results = await run_eval(OpenAIChatModel("gpt-4o-mini"), cases, concurrency=8, out=Path("eval-out"))
    print(table(summarize(results)))

Each case is one ``propose_only`` run (the calls are judged by every gate
and recorded, never executed); ``check`` scores them as BFCL's AST checker
does. See ``tether.eval.harness`` for how failures are sorted.
"""

from tether.eval.bfcl import (
    SINGLE_TURN,
    Case,
    DatasetError,
    bfcl_name,
    load,
    parameters_schema,
    tool_from_document,
    tool_name,
)
from tether.eval.checker import Verdict, check
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

__all__ = [
    "ERROR",
    "MISTAKE",
    "PASSED",
    "REFUSED",
    "RESULTS_FILE",
    "SINGLE_TURN",
    "Case",
    "CaseResult",
    "DatasetError",
    "Row",
    "Verdict",
    "bfcl_name",
    "check",
    "load",
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
