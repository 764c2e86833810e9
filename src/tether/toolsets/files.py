"""Reading files under one root directory, and nothing outside it.

The model names paths; the host decides what they mean. Every path is
resolved, following symlinks, and must land inside the resolved root, so
neither ``..``, an absolute path nor a symlink at any depth leads out.
Error messages repeat only the path the model gave, never the root or the
place a symlink points to.

Both tools are ``untrusted_output``: a file's text and its name were written
by whoever put the file there, not necessarily the run's principal, so
reading them taints the run (side-effecting calls then need approval).

The resolved path is then opened from the root one name at a time, following
no symlink (``O_NOFOLLOW`` at every step, the ``openat`` way), and what is
read is the opened file's own: a symlink, a FIFO or a bigger file put in
place between the check and the read is refused, never followed, waited on
or read whole.

A file with other hard links is not read: one of them may lie outside the root (a hard link, unlike a
symlink, does not say where the file's other names are), and the root holds only a name, not the file.
``list_files`` names such files under "hard_linked", so the model does not ask for them in vain.

A name that is not UTF-8 (possible on Linux, where a name is bytes) is left out of a listing and
counted under "not_utf8": the model can write no path that names it, so it is never shown one.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from tether.core.errors import ConfigurationError
from tether.core.nesting import utf8
from tether.tools import Tool, ToolError, tool

# Bigger files are refused rather than read whole into memory just to be cut.
MAX_FILE_BYTES = 10_000_000
# A bigger directory lists its first entries by name and counts the rest: the model sees no more than
# a result's limit of it anyway, and the host keeps no more names than it can show.
MAX_LISTED_ENTRIES = 1000

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO or a device put in place of the file is opened without waiting for a writer
# (then refused); O_NOCTTY: a terminal is not made the host's controlling terminal.
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

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
            fd = _open_file(base, target)
        except (FileNotFoundError, NotADirectoryError):
            raise ToolError(f"no such file: {shown}") from None
        except _NotRegular:
            raise ToolError(f"not a file: {shown}") from None
        except OSError:  # a symlink put in place since the check (ELOOP), a permission
            raise ToolError(f"cannot read: {shown}") from None
        with open(fd, "rb") as file:
            try:
                status = os.fstat(fd)
                if status.st_nlink > 1:
                    raise ToolError(f"not readable: {shown} has other hard links")
                size = status.st_size
                if size > MAX_FILE_BYTES:
                    raise ToolError(f"file too large: {shown} has {size} bytes, the limit is {MAX_FILE_BYTES}")
                data = file.read(MAX_FILE_BYTES + 1)  # the file may grow while it is read
            except OSError:
                raise ToolError(f"cannot read: {shown}") from None
        if len(data) > MAX_FILE_BYTES:
            raise ToolError(f"file too large: {shown} has more than {MAX_FILE_BYTES} bytes")
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

        "count" is every entry in the directory. A directory of more than 1000 entries lists its first 1000;
        "omitted" says how many more there are. An entry whose name is not UTF-8 is left out, as no path can
        name it; "not_utf8" says how many there are. "hard_linked" names listed files that read_file refuses:
        they have other hard links, which may lie outside the files root.

        Args:
            path: The directory relative to the files root; "." is the root itself.
        """
        target, shown = _confine(base, path)
        try:
            parent, name = _parent(base, target)
        except (FileNotFoundError, NotADirectoryError):
            raise ToolError(f"no such directory: {shown}") from None
        except OSError:  # a symlink put in place since the check (ELOOP), a permission
            raise ToolError(f"cannot list: {shown}") from None
        try:
            fd = _open_directory(name, parent)
        except FileNotFoundError:
            raise ToolError(f"no such directory: {shown}") from None
        except NotADirectoryError:
            raise ToolError(f"not a directory: {shown}") from None
        except OSError:
            raise ToolError(f"cannot list: {shown}") from None
        finally:
            os.close(parent)
        try:
            with os.scandir(fd) as scan:
                first, count, not_utf8 = _first_entries(scan)
                listed = sorted(_entry(base, target, child) for child in first)
        except OSError:
            raise ToolError(f"cannot list: {shown}") from None
        finally:
            os.close(fd)
        entries = [name for name, _ in listed]
        listing: dict[str, Any] = {"path": shown, "entries": entries, "count": count}
        # count == len(entries) + omitted + not_utf8, each of the last two present when not 0.
        if count > len(entries) + not_utf8:
            listing["omitted"] = count - len(entries) - not_utf8
        if not_utf8:
            listing["not_utf8"] = not_utf8
        hard_linked = [name for name, linked in listed if linked]
        if hard_linked:
            listing["hard_linked"] = hard_linked
        return listing

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


class _NotRegular(Exception):
    """The path names something other than a regular file."""


def _parent(base: Path, target: Path) -> tuple[int, str]:
    """A descriptor of the directory holding ``target`` (inside ``base``), and its last name ("." for the root).

    The directory is walked to from ``base`` one name at a time with ``O_NOFOLLOW``: a symlink put in
    place of any of them since ``_confine`` resolved the path is an error (ELOOP), not a way out.
    """
    parts = target.relative_to(base).parts
    fd = os.open(base, _DIRECTORY)
    for part in parts[:-1]:
        try:
            next_fd = _open_directory(part, fd)
        finally:
            os.close(fd)
        fd = next_fd
    return fd, parts[-1] if parts else "."


def _open_directory(name: str, parent: int) -> int:
    """The directory ``name`` in ``parent``, opened following no symlink."""
    try:
        return os.open(name, _DIRECTORY, dir_fd=parent)
    except NotADirectoryError:
        # Linux says ENOTDIR, not ELOOP, for a symlink opened with O_DIRECTORY | O_NOFOLLOW.
        if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
            raise OSError(errno.ELOOP, "a symlink was put in place of a directory") from None
        raise


def _open_file(base: Path, target: Path) -> int:
    """A descriptor of the regular file ``target``, opened following no symlink; ``_NotRegular`` if it is none.

    Its type is looked at before it is opened (a FIFO or a device is never opened) and again after (one
    swapped in between was opened without waiting, and is closed).
    """
    parent, name = _parent(base, target)
    try:
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            raise OSError(errno.ELOOP, "a symlink was put in place of the file")
        if not stat.S_ISREG(mode):
            raise _NotRegular
        fd = os.open(name, _FILE, dir_fd=parent)
    finally:
        os.close(parent)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _NotRegular
    return fd


def _first_entries(entries: Iterator[os.DirEntry[str]]) -> tuple[list[os.DirEntry[str]], int, int]:
    """The first ``MAX_LISTED_ENTRIES`` entries by name, how many there are, and how many of them have a name
    that is not UTF-8 (none of which is kept), holding at most twice that many."""
    kept: list[os.DirEntry[str]] = []
    count = 0
    not_utf8 = 0
    for entry in entries:
        count += 1
        # Bytes that are not UTF-8 come in as lone surrogates (surrogateescape), which no JSON the model
        # writes can hold: shown, such a name would be one the model can neither read nor list.
        if not utf8(entry.name):
            not_utf8 += 1
            continue
        kept.append(entry)
        if len(kept) == 2 * MAX_LISTED_ENTRIES:
            kept = sorted(kept, key=_name)[:MAX_LISTED_ENTRIES]
    return sorted(kept, key=_name)[:MAX_LISTED_ENTRIES], count, not_utf8


def _name(entry: os.DirEntry[str]) -> str:
    return entry.name


def _entry(base: Path, directory: Path, child: os.DirEntry[str]) -> tuple[str, bool]:
    """The entry as listed ("/" after a directory), and whether ``read_file`` refuses it for its other hard links."""
    try:
        if not child.is_symlink():
            if child.is_dir(follow_symlinks=False):
                return f"{child.name}/", False
            # Only a regular file is looked at: a directory's links are its subdirectories' "..".
            status = child.stat(follow_symlinks=False) if child.is_file(follow_symlinks=False) else None
        else:
            # A symlink leading out is listed as a plain name: what its target is, is outside information.
            target = (directory / child.name).resolve()
            status = target.stat() if target.is_relative_to(base) else None
            if status is not None and stat.S_ISDIR(status.st_mode):
                return f"{child.name}/", False
    except (OSError, RuntimeError):  # gone since the scan, a symlink loop
        return child.name, False
    linked = status is not None and stat.S_ISREG(status.st_mode) and status.st_nlink > 1
    return child.name, linked
