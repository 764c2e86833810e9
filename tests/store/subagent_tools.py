"""A sub-agent tool for the crash tests (``--tools subagent_tools``): ``clerk`` runs an agent with ``close_ticket``.

The child agent's model is read from the environment of the process that
imports this module (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``): the test's
FakeServer. ``crash_tools`` is imported as a module, so that its tools are
the child's and not the parent's (``tether run`` offers a module's ``Tool``
objects).
"""

from __future__ import annotations

import crash_tools

from tether import Agent, OpenAIChatModel

clerk = Agent(OpenAIChatModel("fake"), [crash_tools.close_ticket]).as_tool(
    name="clerk", description="A clerk who closes tickets; give it the whole request."
)

clerk_by_hand = Agent(OpenAIChatModel("fake"), [crash_tools.close_ticket_by_hand]).as_tool(
    name="clerk_by_hand", description="A clerk whose unknown outcomes a person settles."
)
