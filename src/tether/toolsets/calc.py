"""Integer arithmetic: the smallest useful toolset, for demos and tests.

Operands are bounded so a model cannot make the host build huge integers,
and typed ``int`` so the strict schema refuses ``true`` and ``"248"``.
The functions are ``async`` only because they are instant: they then run on
the event loop instead of a worker thread (a sync tool may block).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tether.tools import Tool, ToolError, tool

LIMIT = 1_000_000

Operand = Annotated[int, Field(ge=-LIMIT, le=LIMIT)]


@tool(read_only=True)
async def add(a: Operand, b: Operand) -> int:
    """Add two integers: a plus b, the sum.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


@tool(read_only=True)
async def subtract(a: Operand, b: Operand) -> int:
    """Subtract b from a: a minus b, the difference.

    Args:
        a: The integer to subtract from.
        b: The integer to subtract.
    """
    return a - b


@tool(read_only=True)
async def multiply(a: Operand, b: Operand) -> int:
    """Multiply two integers: a times b, the product.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a * b


@tool(read_only=True)
async def divide(a: Operand, b: Operand) -> int:
    """Divide a by b: a divided by b, the quotient, rounded down (integer floor division).

    Args:
        a: The dividend.
        b: The divisor; must not be zero.
    """
    if b == 0:
        raise ToolError("cannot divide by zero")
    return a // b


TOOLS: list[Tool] = [add, subtract, multiply, divide]
