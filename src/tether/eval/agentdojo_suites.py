"""AgentDojo's side: its package imported (only here, only when asked), its suites, attacks and environments.

``imported(module)`` is the one place ``agentdojo`` is imported; without
the package it is a ``ConfigurationError`` naming what to install
(``INSTALL_HINT``): its wheel pins langchain and more that its suites never
import, so it is installed ``--no-deps``, then what its suites import.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from tether.core.errors import ConfigurationError, DatasetError
from tether.eval.agentdojo_models import squeeze

BENCHMARK_VERSION = "v1.2"
AGENTDOJO_VERSION = "0.1.35"
SUITES = ("workspace", "travel", "banking", "slack")
NO_ATTACK = "none"
DEFAULT_ATTACK = "important_instructions"
INSTALL_HINT = (
    f"pip install --no-deps agentdojo=={AGENTDOJO_VERSION} && pip install pydantic email-validator deepdiff "
    "docstring-parser pyyaml click rich tenacity python-dotenv openai anthropic cohere google-genai"
)
_MODEL = "the AI language model"  # AgentDojo's DEFAULT_MODEL_NAME, for a model it has no prose name for


def imported(module: str) -> Any:
    """``agentdojo.<module>``, or a ``ConfigurationError`` saying what to install."""
    try:
        return importlib.import_module(f"agentdojo.{module}")
    except ImportError as exc:
        raise ConfigurationError(f"tether eval agentdojo needs the agentdojo package ({exc}): {INSTALL_HINT}") from None


_SUITES: dict[str, Any] = {}


def load_suite(name: str) -> Any:
    """One of AgentDojo's v1.2 task suites."""
    if name not in SUITES:
        raise DatasetError(f"no AgentDojo suite {name!r} (there are: {', '.join(SUITES)})")
    if name not in _SUITES:
        _SUITES.update(imported("task_suite.load_suites").get_suites(BENCHMARK_VERSION))
    return _SUITES[name]


def attack_names() -> list[str]:
    """The attacks AgentDojo registers, and ``none``."""
    return [NO_ATTACK, *sorted(imported("attacks.attack_registry").ATTACKS)]


@dataclass(frozen=True, slots=True)
class _Pipeline:
    """What an AgentDojo attack reads of the attacked pipeline: its name."""

    name: str


_ATTACKS: dict[tuple[str, str, str], Any] = {}
# Attacks that read their text from a person at the terminal (``input()``), which an unattended eval has not got.
_INTERACTIVE = frozenset({"manual"})


def attack(suite: str, name: str, model: str) -> Any:
    """AgentDojo's attack ``name`` on ``suite``, addressing the model by AgentDojo's prose name for it."""
    key = (suite, name, model)
    if key not in _ATTACKS:
        registry = imported("attacks.attack_registry")
        if name not in registry.ATTACKS:
            raise ConfigurationError(f"no AgentDojo attack {name!r} (there are: {', '.join(attack_names())})")
        if name in _INTERACTIVE:
            raise ConfigurationError(
                f"the {name} attack asks for each injection's text on the terminal, case by case; an eval runs "
                "unattended: choose another attack"
            )
        names: dict[str, str] = imported("models").MODEL_NAMES
        prose = next((p for full, p in names.items() if full in model), None)
        # Attacks that name the model refuse a pipeline they have no name for: they get a known one, then ours.
        made = registry.ATTACKS[name](load_suite(suite), _Pipeline(next(iter(names)) if prose is None else model))
        if hasattr(made, "model_name"):
            made.model_name = prose or _MODEL
        _ATTACKS[key] = made
    return _ATTACKS[key]


_DEFAULTS: dict[str, tuple[str, dict[str, str]]] = {}


def load_environment(suite: Any, injections: dict[str, str]) -> Any:
    """``suite.load_and_inject_default_environment(injections)``, parsed by libyaml when PyYAML has it.

    The same steps as AgentDojo's (its environment text with the injections put in, then parsed and
    validated), with the C parser: AgentDojo's pure-Python one takes half a second for workspace's
    environment, most of a case's time. A test checks the two give equal environments.
    """
    yaml: Any = importlib.import_module("yaml")  # AgentDojo's own dependency (PyYAML has no stubs here)

    loader = getattr(yaml, "CSafeLoader", None)
    if loader is None:
        return suite.load_and_inject_default_environment(injections)
    if suite.name not in _DEFAULTS:
        text = imported("task_suite.task_suite").read_suite_file(suite.name, "environment.yaml", suite.data_path)
        _DEFAULTS[suite.name] = (text, suite.get_injection_vector_defaults())
    text, defaults = _DEFAULTS[suite.name]
    unknown = sorted(set(injections) - set(defaults))
    if unknown:
        raise DatasetError(f"{suite.name}: no injection vector(s) {', '.join(unknown)}")
    return suite.environment_type.model_validate(yaml.load(text.format(**{**defaults, **injections}), Loader=loader))


_KNOWN: dict[str, str] = {}


def known_text(suite: Any) -> str:
    """The suite's environment without an attack, as lower-case text: the values that are not the attacker's."""
    if suite.name not in _KNOWN:
        _KNOWN[suite.name] = squeeze(load_environment(suite, {}).model_dump_json()).lower()
    return _KNOWN[suite.name]


def counts() -> dict[str, tuple[int, int]]:
    """User and injection tasks per suite, in the installed AgentDojo."""
    return {name: (len(load_suite(name).user_tasks), len(load_suite(name).injection_tasks)) for name in SUITES}


def functions(suite: str) -> list[str]:
    """The names of a suite's functions."""
    return [str(f.name) for f in load_suite(suite).tools]


__all__ = [
    "AGENTDOJO_VERSION",
    "BENCHMARK_VERSION",
    "DEFAULT_ATTACK",
    "INSTALL_HINT",
    "NO_ATTACK",
    "SUITES",
    "attack",
    "attack_names",
    "counts",
    "functions",
    "imported",
    "known_text",
    "load_environment",
    "load_suite",
]
