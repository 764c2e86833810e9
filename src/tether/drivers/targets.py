"""Objects an operator names on the command line: ``module:attribute`` or ``file.py:attribute``, as uvicorn takes apps.

The Agent ``tether serve TARGET`` serves (``tether.serve.target``) and the
principal resolver ``tether worker --resolve-principal`` asks are found
here, so both say the same thing when the name is wrong. It sits below the
surfaces so that a worker can use it without the server extra.
Anything that names nothing (no colon, a file or module that is not there,
one that fails to import, a missing attribute) is a ``ConfigurationError``
saying which, never a traceback. A file's folder goes first on
``sys.path``, so that it may import its neighbours; a module is looked for
in the working directory too (the ``tether`` script does not put it on
``sys.path``, ``python -m`` does).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from tether.core.errors import ConfigurationError, TetherError


def load_attribute(target: str, *, usage: str, what: str, example: str) -> Any:
    """The object ``target`` names (``module:attribute``, ``path/to/file.py:attribute``, dotted attributes allowed).

    ``usage`` (``tether serve``), ``what`` (``an Agent``) and ``example`` make the errors say how to name it.
    """
    where, colon, name = target.rpartition(":")
    if not colon or not where or not name:
        raise ConfigurationError(f"{target!r} is not MODULE:ATTRIBUTE or FILE.py:ATTRIBUTE (e.g. {usage} {example})")
    is_file = where.endswith(".py") or "/" in where or "\\" in where
    module = _file(where, usage) if is_file else _module(where, usage, example)
    found: Any = module
    for part in name.split("."):
        if not part.isidentifier() or not hasattr(found, part):
            raise ConfigurationError(f"{where} has no attribute {name!r} ({usage} {where}:NAME names {what})")
        found = getattr(found, part)
    return found


def _file(where: str, usage: str) -> ModuleType:
    path = Path(where)
    if not path.is_file():
        raise ConfigurationError(f"no file {where} ({usage} FILE.py:ATTRIBUTE)")
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = f"tether_target_{path.stem}" if path.stem.isidentifier() else "tether_target"
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


def _module(where: str, usage: str, example: str) -> ModuleType:
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # as uvicorn does: modules of the working directory
    try:
        return importlib.import_module(where)
    except TetherError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name is not None and (where == exc.name or where.startswith(exc.name + ".")):
            raise ConfigurationError(f"no module {where} ({usage} MODULE:ATTRIBUTE, e.g. {example})") from None
        raise _import_failed(where, exc) from None
    except BaseException as exc:
        raise _import_failed(where, exc) from None


def _import_failed(where: str, exc: BaseException) -> ConfigurationError:
    if isinstance(exc, KeyboardInterrupt):
        raise exc
    if isinstance(exc, SyntaxError):
        return ConfigurationError(f"{where} has a syntax error: {exc.msg} (line {exc.lineno})")
    return ConfigurationError(f"importing {where} failed: {type(exc).__name__}: {exc}")
