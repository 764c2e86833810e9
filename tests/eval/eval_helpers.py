"""An eval as the tests run it: tether's own loop against the project's FakeServer, over real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from tether.eval import CaseResult, run_eval
from tether.models.http import DEFAULT_MAX_RETRIES
from tether.models.openai_chat import OpenAIChatModel
from tether.testing.fake_server import FakeServer


def eval_over_http(
    respond: Any,
    cases: Sequence[Any],
    *,
    latency: float = 0.0,
    max_retries: int = DEFAULT_MAX_RETRIES,
    **options: Any,
) -> list[CaseResult]:
    """``run_eval`` of ``cases`` against a FakeServer answering with ``respond`` (``options`` go to ``run_eval``)."""

    async def go() -> list[CaseResult]:
        async with FakeServer(respond, latency=latency) as server:
            model = OpenAIChatModel("fake", base_url=server.base_url, api_key="x", max_retries=max_retries)
            try:
                return await run_eval(model, cases, **options)
            finally:
                await model.aclose()

    return asyncio.run(go())
