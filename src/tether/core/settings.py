"""Model settings: how a model samples its reply, set per model, per agent and per run.

A ``ModelSettings`` names only what it sets (``None``: not set). Layers are
merged field by field, each over the one before: the model's own settings
(``OpenAIChatModel(settings=...)``), then the agent's
(``Agent(model_settings=...)``), then the run's (``agent.run(...,
model_settings=...)``). ``extra`` is merged key by key. Each adapter
translates the result into its protocol's fields, or refuses a field it has
no equivalent for with a ``ConfigurationError`` before the run starts (see
the table in docs/guides/agents.md); a setting is never dropped silently.

The merged settings of the agent and the run are stored with the run's
setup (``with_settings``, under ``SETUP_KEY``), so a stored run is resumed
with them (``stored_settings``). Not in ``RunConfig``: that value is also
the wire format of Temporal's payloads, whose fields never change shape.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from tether.core.errors import ConfigurationError
from tether.core.redact import REDACTED

# The key of a run's setup that holds its model settings: their JSON text, so that the setup's redaction,
# which goes by key names (a "stop_token_ids" looks like a token), leaves them whole; a secret written in
# them (a bearer token, an sk- key) is still redacted, and such a run is not resumed with it.
SETUP_KEY = "model_settings"


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """How the model should sample; ``None`` leaves a field to the layer below (at the bottom, the provider).

    ``max_tokens``: the most tokens a reply may have (a reply cut there ends
    the run ``truncated``). ``stop``: sequences that end the reply (a string
    or several). ``parallel_tool_calls=False``: at most one call per reply.
    ``extra``: provider fields sent as they are, under the typed ones (a
    typed field, or a field the adapter writes itself, wins over the same key).
    """

    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] | None = None
    parallel_tool_calls: bool | None = None
    extra: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            ):
                raise ConfigurationError(f"ModelSettings.{name} must be a finite number, not {value!r}")
        if self.temperature is not None and self.temperature < 0:
            raise ConfigurationError(f"ModelSettings.temperature must be 0 or more, not {self.temperature!r}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ConfigurationError(f"ModelSettings.top_p must be above 0 and at most 1, not {self.top_p!r}")
        for name in ("max_tokens", "seed"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigurationError(f"ModelSettings.{name} must be an integer, not {value!r}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ConfigurationError(f"ModelSettings.max_tokens must be at least 1, not {self.max_tokens!r}")
        if self.parallel_tool_calls is not None and not isinstance(self.parallel_tool_calls, bool):
            raise ConfigurationError(
                f"ModelSettings.parallel_tool_calls must be True or False, not {self.parallel_tool_calls!r}"
            )
        if self.stop is not None:
            object.__setattr__(self, "stop", _stop(self.stop))
        if self.extra is not None:
            object.__setattr__(self, "extra", _extra(self.extra))

    def merged(self, over: ModelSettings | None) -> ModelSettings:
        """These settings with every field ``over`` sets taking its place (``extra`` key by key)."""
        if over is None:
            return self
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for f in fields(over):
            value = getattr(over, f.name)
            if value is not None:
                values[f.name] = {**(self.extra or {}), **value} if f.name == "extra" else value
        return ModelSettings(**values)

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set, as JSON values (``from_dict`` reads them back)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = list(value) if f.name == "stop" else dict(value) if f.name == "extra" else value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelSettings:
        """The settings named in ``data``; an unknown name is a ``ConfigurationError`` listing the known ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigurationError(
                f"unknown model setting {unknown[0]!r}: the settings are {', '.join(f.name for f in fields(cls))}"
            )
        return cls(**data)


def merge_settings(*layers: ModelSettings | None) -> ModelSettings | None:
    """The layers merged in order, each over the one before; None when none sets anything."""
    merged: ModelSettings | None = None
    for layer in layers:
        if layer is not None:
            merged = layer if merged is None else merged.merged(layer)
    return merged if merged is not None and merged != EMPTY else None


def _stop(value: object) -> tuple[str, ...]:
    stop = (value,) if isinstance(value, str) else value
    if not isinstance(stop, Sequence) or not stop or not all(isinstance(s, str) and s for s in stop):
        raise ConfigurationError(f"ModelSettings.stop must be a non-empty string or a list of them, not {value!r}")
    return tuple(stop)


def _extra(value: object) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigurationError(f"ModelSettings.extra must be a dict with string keys, not {value!r}")
    try:  # stored with the run's configuration, and sent as JSON
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"ModelSettings.extra must hold JSON values only: {exc}") from None
    return dict(value)


EMPTY = ModelSettings()


def with_settings(setup: dict[str, Any], settings: ModelSettings | None) -> dict[str, Any]:
    """``setup`` with ``settings`` to store beside it (``setup`` itself when there are none to store or drop).

    A setup taken from a stored run (``tether resume`` rebuilds its Agent from one) holds that run's settings:
    they are not another run's."""
    if settings is None:
        return setup if SETUP_KEY not in setup else {k: v for k, v in setup.items() if k != SETUP_KEY}
    return {**setup, SETUP_KEY: json.dumps(settings.to_dict(), sort_keys=True, ensure_ascii=False)}


def stored_settings(setup: Mapping[str, Any]) -> ModelSettings | None:
    """The model settings a stored run's setup holds (``with_settings``), or None."""
    text = setup.get(SETUP_KEY)
    if not text:
        return None
    if not isinstance(text, str) or REDACTED in text:
        raise ConfigurationError(
            "the run's model settings held a secret, which was not stored: the run cannot be sent the same "
            "settings again (give a model its secrets in its own arguments, not in ModelSettings.extra)"
        )
    try:
        data = json.loads(text)
    except ValueError:
        raise ConfigurationError("the run's stored model settings are not readable") from None
    return ModelSettings.from_dict(data)
