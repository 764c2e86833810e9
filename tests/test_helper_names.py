"""Each public testing helper name means one thing across tether's fakes (issue 10, point 7)."""

from __future__ import annotations

import inspect

import tether.models.scripted as scripted
import tether.testing
from tether.core.messages import ModelReply
from tether.testing.fake_server import Reply


def public_functions(module: object) -> set[str]:
    return {n for n, v in vars(module).items() if not n.startswith("_") and inspect.isfunction(v)}


def test_no_scripted_helper_shares_a_name_with_a_fake_server_helper() -> None:
    shared = public_functions(scripted) & set(tether.testing.__all__)
    assert shared == set(), f"two different helpers named {sorted(shared)}"


def test_the_scripted_helpers_build_model_replies_and_the_server_helpers_wire_replies() -> None:
    assert isinstance(scripted.reply_text("hi"), ModelReply)
    assert isinstance(scripted.reply_calls(("c1", "f", "{}")), ModelReply)
    assert isinstance(tether.testing.text("hi"), Reply)
    assert isinstance(tether.testing.tool_calls([("c1", "f", "{}")]), Reply)
