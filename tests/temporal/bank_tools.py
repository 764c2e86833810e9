"""A tool whose arguments are secrets (an API token, an IBAN), for the tests of encrypted Temporal payloads.

``transfer`` needs approval and appends one line per effect to the file
named by ``SHOP_ORDERS`` (as ``shop_tools.place_order`` does).
"""

from __future__ import annotations

import json
import os

from tether.tools import ToolContext, tool


@tool(approval=True)
def transfer(iban: str, amount: int, api_token: str, context: ToolContext) -> dict[str, str]:
    """Transfer an amount to an account.

    Args:
        iban: The account to pay.
        amount: In euros.
        api_token: The bank's API token.
    """
    with open(os.environ["SHOP_ORDERS"], "a") as f:
        f.write(json.dumps({"key": context.idempotency_key, "amount": amount}) + "\n")
    return {"transfer": context.idempotency_key}


TOOLS = [transfer]
