"""What an eval's results were made with: ``eval.json`` beside ``results.jsonl``, and the check on resume.

Running the same command again resumes an eval (``tether.eval.harness``):
the cases already scored are kept, the others run. Run with another model,
system message or model settings, it would put a second eval's verdicts in
the same file, and the report would describe a model that never answered
half of them. So the first run records what decides a case's answer
(``EvalRecord``: the benchmark, the model, where and how it is reached, the
system message, the model settings, the provider's leniencies, AgentDojo's
setting, and the versions of tether and of the benchmark's package that
ran and scored the cases), and a later run into the same ``--out`` must
have the same record:

- no ``eval.json`` (a folder made before tether recorded one) is taken as
  this eval's, and the record is written; so is a record without versions
  (made before tether recorded them), when the rest is equal;
- another record, while ``results.jsonl`` holds a case with a verdict, is a
  ``ConfigurationError`` naming each field that differs, raised before any
  case is sent or any line rewritten; nothing in the folder changes. With
  no verdict there (none scored yet, or every case an error, asked again
  anyway) the new record replaces the old;
- an ``eval.json`` that is not such a record is a ``DatasetError`` naming it.

What only chooses cases (datasets, suites, attacks, ``--limit``) and how
fast they run (``--concurrency``) is not recorded: running more cases of the
same eval into the same folder is what resuming is for. No API key is
recorded, nor a base URL's user, query or fragment; a system message longer
than ``SHOWN_CHARS``, or one or settings holding what looks like a secret,
is recorded by its sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tether.core import nesting
from tether.core.budget import Compat
from tether.core.errors import ConfigurationError, DatasetError
from tether.core.redact import redact, redact_text
from tether.core.settings import ModelSettings

RECORD_FILE = "eval.json"
EMBEDDED = "embedded"
SHOWN_CHARS = 200  # a longer system message is recorded by its sha256
_VALUE_CHARS = 80  # of a value quoted in an error (a sha256 fits)

# The option that sets each field, for the error that names it.
OPTIONS = {
    "benchmark": "the command",
    "model": "--model",
    "endpoint": "--base-url",
    "protocol": "--protocol",
    "provider": "--provider",
    "system": "-s",
    "model_settings": "-o",
    "compat": "--provider",
    "setting": "--setting",
    "versions": "the installed tether and benchmark",
}


@dataclass(frozen=True, slots=True)
class EvalRecord:
    """What decides a case's answer in one eval; two runs into one ``--out`` must have equal records.

    ``endpoint`` is the base URL as ``scheme://host:port/path`` (``bare_url``), ``embedded`` for the
    in-process model, ``scripted:<kind>`` for a scripted one. ``system`` and ``model_settings`` are as
    ``recorded_system`` and ``recorded_settings`` give them (None: not given). ``compat``: the
    provider's ``Compat`` switches that are on. ``setting``: AgentDojo's (None for other evals).
    ``versions``: ``"name version"`` of tether and of each package the benchmark's cases and checks come from
    (``installed``); empty in a record made before they were recorded.
    """

    benchmark: str
    model: str
    endpoint: str
    protocol: str | None = None
    provider: str | None = None
    system: str | None = None
    model_settings: dict[str, Any] | str | None = None
    compat: tuple[str, ...] = ()
    setting: str | None = None
    versions: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        benchmark: str,
        model: str,
        endpoint: str,
        *,
        protocol: str | None = None,
        provider: str | None = None,
        system: str | None = None,
        model_settings: ModelSettings | None = None,
        compat: Compat | None = None,
        setting: str | None = None,
        packages: tuple[str, ...] = (),
    ) -> EvalRecord:
        """The record of an eval run with these options, each as it is recorded (no secret, no long text);
        ``packages``: the distributions the benchmark comes from, recorded with tether's version (``installed``)."""
        switches = () if compat is None else tuple(k for k, on in sorted(asdict(compat).items()) if on)
        return cls(
            benchmark,
            model,
            endpoint,
            protocol,
            provider,
            recorded_system(system),
            recorded_settings(model_settings),
            switches,
            setting,
            installed(packages),
        )

    def to_dict(self) -> dict[str, Any]:
        """The record as ``eval.json`` holds it."""
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Any, where: str) -> EvalRecord:
        """The record ``data`` (``eval.json``'s content) holds; a ``DatasetError`` naming ``where`` when it holds
        none: not an object, without benchmark, model or endpoint, or a field of the wrong type."""
        if not isinstance(data, dict):
            raise DatasetError(f"{where}: not an eval record (expected a JSON object)")
        missing = [name for name in _REQUIRED if name not in data]
        if missing:
            raise DatasetError(f"{where}: not an eval record (no {', '.join(missing)})")
        values: dict[str, Any] = {}
        for name, (kinds, said) in _KINDS.items():
            if name in data:
                value: Any = data[name]
                strings = not isinstance(value, list) or all(isinstance(v, str) for v in value)
                if not isinstance(value, kinds) or not strings:
                    raise DatasetError(f"{where}: not an eval record ({name} must be {said})")
                values[name] = tuple(value) if isinstance(value, list) else value
        return cls(**values)

    def differences(self, earlier: EvalRecord) -> list[str]:
        """Each field that differs from ``earlier``'s, as ``name (option): <earlier> there, <this> here``."""
        found = []
        for f in fields(self):
            before, now = getattr(earlier, f.name), getattr(self, f.name)
            if before != now:
                found.append(f"{f.name} ({OPTIONS[f.name]}): {_shown(before)} there, {_shown(now)} here")
        return found


_REQUIRED = ("benchmark", "model", "endpoint")
_NONE = type(None)
# Each field's JSON types, and how an error says them; a list is of strings.
_KINDS: dict[str, tuple[tuple[type, ...], str]] = {
    "benchmark": ((str,), "a string"),
    "model": ((str,), "a string"),
    "endpoint": ((str,), "a string"),
    "protocol": ((str, _NONE), "a string or null"),
    "provider": ((str, _NONE), "a string or null"),
    "system": ((str, _NONE), "a string or null"),
    "model_settings": ((dict, str, _NONE), "an object, a string or null"),
    "compat": ((list,), "a list of strings"),
    "setting": ((str, _NONE), "a string or null"),
    "versions": ((list,), "a list of strings"),
}


def installed(packages: tuple[str, ...]) -> tuple[str, ...]:
    """``"name version"`` of tether and of each of ``packages`` (a distribution's name), as installed here."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in ("tether", *packages):
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return tuple(found)


def _shown(value: Any) -> str:
    """A recorded value as an error quotes it: JSON, at most ``_VALUE_CHARS`` characters."""
    if value is None:
        return "(none)"
    text = json.dumps(list(value) if isinstance(value, tuple) else value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 1] + "…"


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def recorded_system(system: str | None) -> str | None:
    """The system message as it is recorded: itself, or its sha256 when it is long or holds a secret's shape."""
    if system is None:
        return None
    if len(system) <= SHOWN_CHARS and redact_text(system) == system and nesting.utf8(system):
        return system
    return _digest(system)


def recorded_settings(settings: ModelSettings | None) -> dict[str, Any] | str | None:
    """The model settings as they are recorded: their JSON object, or its sha256 when it holds a secret's shape
    (``extra`` may carry provider fields)."""
    if settings is None or not settings.to_dict():
        return None
    values = json.loads(json.dumps(settings.to_dict()))  # JSON's types, as eval.json gives them back
    if redact(values) != values:
        return _digest(json.dumps(values, sort_keys=True))
    return dict(values)


def bare_url(url: str) -> str:
    """``url`` as ``scheme://host:port/path``: no user or password, no query, no fragment, no trailing slash."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}".rstrip("/")


# ---------------------------------------------------------------- the file


def read_record(out: Path) -> EvalRecord | None:
    """The record in ``out/eval.json``; None when there is none. One that cannot be read, or is not a record,
    is a ``DatasetError`` naming the file."""
    path = out / RECORD_FILE
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # nothing there (the results' writer says why it cannot be)
        return None
    except OSError as exc:
        raise DatasetError(f"cannot read {path}: {exc.strerror}") from None
    try:
        value = nesting.loads(data.decode("utf-8"), nesting.MAX_DEPTH)
    except UnicodeDecodeError:
        raise DatasetError(f"{path}: not an eval record (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: not an eval record (not JSON: {exc.msg})") from None
    except ValueError as exc:  # nested too deep
        raise DatasetError(f"{path}: not an eval record ({exc})") from None
    return EvalRecord.from_dict(value, str(path))


def check_record(out: Path, record: EvalRecord, scored: bool) -> EvalRecord | None:
    """Refuse to resume ``out`` with ``record`` when its results were made with another (see the module
    docstring); ``scored``: its results.jsonl holds a case with a verdict. Returns the record found there."""
    earlier = read_record(out)
    if earlier is None or not scored:
        return earlier
    # A record made before versions were recorded is taken as made with these (and then rewritten with them).
    known = earlier if earlier.versions else replace(earlier, versions=record.versions)
    if known == record:
        return earlier
    differences = "; ".join(record.differences(known))
    raise ConfigurationError(
        f"{out} holds the results of another eval ({out / RECORD_FILE}): {differences}; resuming would mix two "
        "evals in one results file: give this one another --out, or run it with the options of the first"
    )


def write_record(out: Path, record: EvalRecord) -> None:
    """Write ``out/eval.json`` whole (a new file renamed over it): a process killed meanwhile leaves the old file
    or the new one. One that cannot be written is a ``ConfigurationError`` naming the folder."""
    path = out / RECORD_FILE
    fresh = path.with_name(f".{RECORD_FILE}.new")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with fresh.open("w", encoding="utf-8") as handle:
            handle.write(json.dumps(record.to_dict(), indent=2) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(fresh, path)
    except OSError as exc:
        if fresh.is_file():
            fresh.unlink()
        raise ConfigurationError(f"cannot write the results in {out}: {exc.strerror}") from None
