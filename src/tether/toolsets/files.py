"""Reading files under one root directory, and nothing outside it.

The model names paths; the host decides what they mean. Every path is
resolved, following symlinks, and must land inside the resolved root, so
neither ``..``, an absolute path nor a symlink at any depth leads out.
Error messages repeat only the path the model gave, never the root or the
place a symlink points to.

Both tools are ``untrusted_output``: a file's text and its name were written
by whoever put the file there, not necessarily the run's principal, so
reading them taints the run (side-effecting calls then need approval).

A symlink swapped in between the check and the read could still lead out;
the root is meant to be a directory the model's user controls, not one an
attacker writes to concurrently.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from tether.core.errors import ConfigurationError
from tether.tools import Tool, ToolError, tool

# Bigger files are refused rather than read whole into memory just to be cut.
MAX_FILE_BYTES = 10_000_000

PathArgument = Annotated[str, Field(min_length=1, max_length=1024)]


def files_tools(root: Path) -> list[Tool]:
    """``read_file`` and ``list_files``, both confined to ``root``."""
    base = root.resolve()
    if not base.is_dir():
        raise ConfigurationError(f"files root is not a directory: {root}")

    @tool(read_only=True, untrusted_output=True)
    def read_file(path: PathArgument) -> str:
        """Read a UTF-8 text file under the files root.

        Args:
            path: The file's path relative to the files root, e.g. "notes/todo.txt".
        """
        target, shown = _confine(base, path)
        try:
            if not target.exists():
                raise ToolError(f"no such file: {shown}")
            if not target.is_file():
                raise ToolError(f"not a file: {shown}")
            size = target.stat().st_size
            if size > MAX_FILE_BYTES:
                raise ToolError(f"file too large: {shown} has {size} bytes, the limit is {MAX_FILE_BYTES}")
            data = target.read_bytes()
        except OSError:
            raise ToolError(f"cannot read: {shown}") from None
        # Valid UTF-8 can still hold NUL bytes; no text file does.
        if b"\x00" in data:
            raise ToolError(f"not a text file: {shown} is binary")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"not a text file: {shown} is not UTF-8") from None

    @tool(read_only=True, untrusted_output=True)
    def list_files(path: PathArgument = ".") -> dict[str, Any]:
        """List a directory under the files root, sorted; directories end with "/".

        Args:
            path: The directory relative to the files root; "." is the root itself.
        """
        target, shown = _confine(base, path)
        try:
            if not target.exists():
                raise ToolError(f"no such directory: {shown}")
            if not target.is_dir():
                raise ToolError(f"not a directory: {shown}")
            entries = sorted(_entry(base, child) for child in target.iterdir())
        except OSError:
            raise ToolError(f"cannot list: {shown}") from None
        return {"path": shown, "entries": entries, "count": len(entries)}

    return [read_file, list_files]


def _confine(base: Path, path: str) -> tuple[Path, str]:
    """The resolved target inside ``base``, and the path as shown in messages."""
    relative = Path(path)
    shown = relative.as_posix()
    # The resolve check below is the guard; these two only give clearer messages.
    # An absolute path is not echoed: it may spell out where the root lives.
    if relative.anchor:
        raise ToolError("path must be relative to the files root")
    if ".." in relative.parts:
        raise ToolError(f"path must not contain '..': {shown}")
    try:
        target = (base / relative).resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL byte
        raise ToolError(f"invalid path: {shown}") from None
    if not target.is_relative_to(base):
        raise ToolError(f"path leads outside the files root: {shown}")
    return target, shown


def _entry(base: Path, child: Path) -> str:
    # A symlink leading out is listed as a plain name: whether its target is
    # a directory is outside information.
    try:
        target = child.resolve()
        is_dir = target.is_relative_to(base) and target.is_dir()
    except (OSError, RuntimeError):
        is_dir = False
    return f"{child.name}/" if is_dir else child.name
