"""Drivers: what performs the run state machine's commands.

``tether.drivers.local`` drives a run in this process on asyncio;
``tether.drivers.temporal`` drives it as a Temporal workflow, durable across
workers. Both drive the same core (``tether.core.machine``); what they share
beyond it is in ``tether.drivers.common``; ``tether.drivers.tracing`` gives
either OpenTelemetry spans.
"""
