"""tether.tools: declaring tools, strict decoding and validation, results."""

from tether.tools.context import ALL_SCOPES, LOCAL_PRINCIPAL, Principal, RunContext, ToolContext
from tether.tools.decoding import InvalidJson, canonical, strict_loads
from tether.tools.tool import (
    DEFAULT_MAX_RESULT_CHARS,
    DEFAULT_TIMEOUT,
    Executed,
    NotExecuted,
    Retry,
    Tool,
    ToolError,
    tool,
    tool_from_schema,
)
from tether.tools.toolbox import Toolbox, ToolResult, result_envelope, truncate

__all__ = [
    "ALL_SCOPES",
    "DEFAULT_MAX_RESULT_CHARS",
    "DEFAULT_TIMEOUT",
    "LOCAL_PRINCIPAL",
    "Executed",
    "InvalidJson",
    "NotExecuted",
    "Principal",
    "Retry",
    "RunContext",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "Toolbox",
    "canonical",
    "result_envelope",
    "strict_loads",
    "tool",
    "tool_from_schema",
    "truncate",
]
