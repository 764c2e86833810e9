"""Built-in toolsets by short name, and toolsets from any importable module.

A toolset is a list of tools chosen by one word on the command line:
``calc``, ``clock`` or ``files``. Anything else names a module (``pkg.mod``,
also one in the current directory) or a file (``path/to/tools.py``) whose
module-level ``Tool`` objects are the toolset, or one attribute of it
(``pkg.mod:TOOLS``) holding a ``Tool`` or a list of them. Every way this can
go wrong is a ``ConfigurationError`` that says what to fix.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import ModuleType

from tether.core.errors import ConfigurationError
from tether.tools import Tool
from tether.toolsets import calc, clock
from tether.toolsets.files import files_tools

FILES_ROOT_ENV = "TETHER_FILES_ROOT"

Loader = Callable[[str | None], list[Tool]]

# Each loader takes the --files-root flag; only ``files`` uses it.
TOOLSETS: Mapping[str, Loader] = {
    "calc": lambda _root: list(calc.TOOLS),
    "clock": lambda _root: list(clock.TOOLS),
    "files": lambda root: files_tools(resolve_files_root(root)),
}


def resolve_files_root(flag: str | None) -> Path:
    """The ``files`` toolset's root: the flag, else ``$TETHER_FILES_ROOT``."""
    value = flag or os.environ.get(FILES_ROOT_ENV)
    if not value:
        raise ConfigurationError(f"the files toolset needs a root directory: set --files-root or {FILES_ROOT_ENV}")
    return Path(value)


def load_toolset(name_or_module: str, *, files_root: str | None = None) -> list[Tool]:
    """The tools of a built-in toolset, a module, or a ``module:attribute``."""
    builtin = TOOLSETS.get(name_or_module)
    if builtin is not None:
        return builtin(files_root)
    module_name, _, attribute = name_or_module.partition(":")
    try:
        module = _import(module_name)
    except ModuleNotFoundError as exc:
        # Only the module itself missing means an unknown name; a missing
        # dependency of an existing module is an import failure.
        missing = exc.name or ""
        if module_name != missing and not module_name.startswith(f"{missing}."):
            raise _error(f"cannot import toolset module {module_name!r}: {exc}") from exc
        raise _error(f"unknown toolset {name_or_module!r}: neither a built-in nor an importable module") from None
    except ConfigurationError:
        raise
    except (Exception, SystemExit) as exc:  # a module that exits as it is imported has given no tools
        raise _error(f"cannot import toolset module {module_name!r}: {type(exc).__name__}: {exc}") from exc
    if attribute:
        value = getattr(module, attribute, None)
        found = [value] if isinstance(value, Tool) else value
        if not isinstance(found, list | tuple) or not all(isinstance(t, Tool) for t in found):
            raise _error(f"{name_or_module!r} is not a Tool or a list of Tools")
        tools = list(found)
    else:
        tools = _unique(v for v in vars(module).values() if isinstance(v, Tool))
    if not tools:
        raise _error(f"toolset {name_or_module!r} has no tools")
    return tools


def toolset_reference(name_or_module: str) -> str:
    """How to name a toolset in a stored run so that it loads the same from any directory.

    A file, or a module found only in the current directory, by its absolute path (keeping a
    ``:attribute``); a built-in or an importable module as given.
    """
    if name_or_module in TOOLSETS:
        return name_or_module
    module_name, colon, attribute = name_or_module.partition(":")
    if module_name.endswith(".py"):
        path = Path(module_name)
    else:
        path = Path.cwd() / (module_name.replace(".", os.sep) + ".py")
        if not path.is_file() or _importable(module_name, path):
            return name_or_module
    return f"{path.resolve()}{colon}{attribute}"


def _importable(module_name: str, local: Path) -> bool:
    """Whether ``module_name`` imports from somewhere other than the file ``local`` (the current directory)."""
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return False
    if spec is None or spec.origin is None:
        return False
    return Path(spec.origin).resolve() != local.resolve()


def _import(module_name: str) -> ModuleType:
    """A module by name, from the current directory when it is there, or a ``.py`` file by path.

    The ``tether`` console script does not put the current directory on
    ``sys.path`` (``python -m`` does), so a module beside the user is looked
    for there explicitly.
    """
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_file():
            raise _error(f"no toolset file {module_name!r}")
        return _from_file(path)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        local = Path.cwd() / (module_name.replace(".", os.sep) + ".py")
        if exc.name == module_name.partition(".")[0] and local.is_file():
            return _from_file(local)
        raise


def _from_file(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise _error(f"cannot load toolset file {str(path)!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(path.stem, module)  # so the tools' own imports and pickling find it
    spec.loader.exec_module(module)
    return module


def _unique(tools: Iterable[Tool]) -> list[Tool]:
    # One tool bound to two module-level names is still one tool.
    return list({id(t): t for t in tools}.values())


def _error(message: str) -> ConfigurationError:
    first_line = message.splitlines()[0] if message else message
    return ConfigurationError(f"{first_line}; built-in toolsets: {', '.join(sorted(TOOLSETS))}")


__all__ = ["FILES_ROOT_ENV", "TOOLSETS", "load_toolset", "resolve_files_root", "toolset_reference"]
