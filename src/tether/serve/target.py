"""The Agent ``tether serve TARGET`` names: ``module:attribute`` or ``file.py:attribute``, as uvicorn takes apps.

The attribute is an ``Agent``, or a function of no arguments returning one.
Anything else (no colon, a file or module that is not there, one that
fails to import, a missing attribute, something that is not an Agent) is a
``ConfigurationError`` saying which, never a traceback. A file's folder
goes first on ``sys.path``, so that it may import its neighbours.
While it loads, ``SERVED`` is set: an Agent with a tool that needs approval
is built without a store or an approver of its own.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from tether.core.errors import ConfigurationError, TetherError
from tether.drivers.local.runner import SERVED, Agent

EXAMPLE = "agent.py:agent or my_package.agents:support"


def load_agent(target: str) -> Agent:
    """The Agent ``target`` names (``module:attribute`` or ``path/to/file.py:attribute``).

    It is built with ``SERVED`` set: it needs neither a store nor an approver (the service gives it both).
    """
    token = SERVED.set(True)
    try:
        return _load(target)
    finally:
        SERVED.reset(token)


def _load(target: str) -> Agent:
    where, colon, name = target.rpartition(":")
    if not colon or not where or not name:
        raise ConfigurationError(f"{target!r} is not MODULE:ATTRIBUTE or FILE.py:ATTRIBUTE (e.g. {EXAMPLE})")
    module = _file(where) if where.endswith(".py") or "/" in where or "\\" in where else _module(where)
    found: Any = module
    for part in name.split("."):
        if not part.isidentifier() or not hasattr(found, part):
            raise ConfigurationError(f"{where} has no attribute {name!r} (tether serve {where}:NAME names an Agent)")
        found = getattr(found, part)
    if not isinstance(found, Agent) and callable(found) and not isinstance(found, type):
        try:
            found = found()
        except TetherError:
            raise
        except (Exception, SystemExit) as exc:  # a factory that exits has not given an Agent: not a clean exit
            raise ConfigurationError(f"{target}() failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(found, Agent):
        raise ConfigurationError(f"{target} is a {type(found).__name__}, not an Agent (or a function returning one)")
    return found


def _file(where: str) -> ModuleType:
    path = Path(where)
    if not path.is_file():
        raise ConfigurationError(f"no file {where} (tether serve FILE.py:ATTRIBUTE)")
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = f"tether_served_{path.stem}" if path.stem.isidentifier() else "tether_served_agent"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigurationError(f"{where} is not a Python file tether can import")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up by name
    try:
        spec.loader.exec_module(module)
    except TetherError:
        raise
    except BaseException as exc:
        sys.modules.pop(name, None)
        raise _import_failed(where, exc) from None
    return module


def _module(where: str) -> ModuleType:
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # as uvicorn does: modules of the working directory
    try:
        return importlib.import_module(where)
    except TetherError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name is not None and (where == exc.name or where.startswith(exc.name + ".")):
            raise ConfigurationError(f"no module {where} (tether serve MODULE:ATTRIBUTE, e.g. {EXAMPLE})") from None
        raise _import_failed(where, exc) from None
    except BaseException as exc:
        raise _import_failed(where, exc) from None


def _import_failed(where: str, exc: BaseException) -> ConfigurationError:
    if isinstance(exc, KeyboardInterrupt):
        raise exc
    if isinstance(exc, SyntaxError):
        return ConfigurationError(f"{where} has a syntax error: {exc.msg} (line {exc.lineno})")
    return ConfigurationError(f"importing {where} failed: {type(exc).__name__}: {exc}")
