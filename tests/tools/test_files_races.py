"""The files toolset against a root that changes while a call reads it, and against roots too big to read whole.

The change is made at the moment the tool opens the path (an audit hook runs it just before the
open), so the race the host must survive happens on every run, not by chance.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_toolsets import call, error, result

from tether.tools import Toolbox
from tether.toolsets.files import MAX_FILE_BYTES, MAX_LISTED_ENTRIES, files_tools

# What to do at the next open of a path ending in one of the names; audit hooks cannot be removed,
# so there is one hook for the module, idle while nothing is armed.
_ARMED: dict[str, Any] = {}
_OPENS = ("open", "os.listdir", "os.scandir")


def _on_audit(
    event: str,
    args: tuple[Any, ...],
    opens: tuple[str, ...] = _OPENS,
    armed: dict[str, Any] = _ARMED,
    paths: tuple[type, ...] = (str, bytes, os.PathLike),
    fsdecode: Any = os.fsdecode,
) -> None:
    # Bound as defaults: the hook outlives the module's globals, which the interpreter clears as it exits.
    if event not in opens or not armed or not isinstance(args[0], paths):
        return
    name = fsdecode(args[0])
    if name.rstrip("/").endswith(armed["names"]):
        action = armed.pop("action")
        armed.clear()
        action()


sys.addaudithook(_on_audit)


@pytest.fixture
def armed() -> Iterator[Callable[[tuple[str, ...], Callable[[], None]], None]]:
    def arm(names: tuple[str, ...], action: Callable[[], None]) -> None:
        _ARMED.update(names=names, action=action)

    yield arm
    _ARMED.clear()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A root with ``docs/a.txt``, and a directory outside it with a secret ``a.txt`` and a name only it has."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.txt").write_text("SECRET")
    (outside / "only-outside.txt").write_text("SECRET")
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.txt").write_text("inside")
    return root


@pytest.fixture
def files(root: Path) -> Toolbox:
    return Toolbox(files_tools(root))


def swap_dir_for_link(root: Path) -> None:
    os.rename(root / "docs", root / "docs.old")
    (root / "docs").symlink_to(root.parent / "outside", target_is_directory=True)


def swap_file_for_link(root: Path) -> None:
    os.rename(root / "docs" / "a.txt", root / "docs" / "a.old")
    (root / "docs" / "a.txt").symlink_to(root.parent / "outside" / "a.txt")


@pytest.mark.parametrize("swap", [swap_dir_for_link, swap_file_for_link])
async def test_a_symlink_swapped_in_while_reading_is_not_followed(
    files: Toolbox, root: Path, armed: Any, swap: Callable[[Path], None]
) -> None:
    armed(("docs", "a.txt"), lambda: swap(root))
    raw = await call(files, "read_file", {"path": "docs/a.txt"})
    assert not _ARMED, "the swap ran"
    assert error(raw, "tool_failed") == "cannot read: docs/a.txt"
    assert "SECRET" not in raw


async def test_a_directory_swapped_for_a_symlink_while_listing_is_not_followed(
    files: Toolbox, root: Path, armed: Any
) -> None:
    armed(("docs",), lambda: swap_dir_for_link(root))
    raw = await call(files, "list_files", {"path": "docs"})
    assert not _ARMED, "the swap ran"
    assert "only-outside" not in raw
    assert error(raw, "tool_failed") == "cannot list: docs"


@pytest.fixture
def fifo_writer(root: Path) -> Iterator[Callable[[], None]]:
    """Swaps ``docs/a.txt`` for a FIFO whose writer opens and closes it at once, if a reader ever comes.

    A reader that opened it would read nothing and go on; without the writer it would wait forever.
    """
    fifo = root / "docs" / "a.txt"
    threads: list[threading.Thread] = []

    def write_once() -> None:
        os.close(os.open(fifo, os.O_WRONLY))

    def swap() -> None:
        os.rename(fifo, root / "docs" / "a.old")
        os.mkfifo(fifo)
        threads.append(threading.Thread(target=write_once, daemon=True))
        threads[0].start()

    yield swap
    if threads:
        # Let a writer still waiting for a reader finish.
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        threads[0].join()
        os.close(reader)


async def test_a_fifo_swapped_in_while_reading_is_not_read(
    files: Toolbox, armed: Any, fifo_writer: Callable[[], None]
) -> None:
    armed(("a.txt",), fifo_writer)
    raw = await call(files, "read_file", {"path": "docs/a.txt"})
    assert not _ARMED, "the swap ran"
    assert error(raw, "tool_failed") == "not a file: docs/a.txt"


async def test_a_file_that_grows_past_the_limit_while_reading_is_refused(
    files: Toolbox, root: Path, armed: Any
) -> None:
    def grow() -> None:
        with open(root / "docs" / "a.txt", "ab") as handle:
            handle.write(b"x" * MAX_FILE_BYTES)

    armed(("a.txt",), grow)
    raw = await call(files, "read_file", {"path": "docs/a.txt"})
    assert not _ARMED, "the swap ran"
    assert error(raw, "tool_failed").startswith("file too large: docs/a.txt has ")


async def test_a_big_directory_lists_its_first_entries_and_counts_all(files: Toolbox, root: Path) -> None:
    big = root / "big"
    big.mkdir()
    total = MAX_LISTED_ENTRIES + 5
    for i in range(total):
        (big / f"{i:05d}").touch()
    (big / "00003").unlink()
    (big / "00003").mkdir()
    # Names that are not UTF-8, sorting first: left out and counted apart, they take no place in the listing.
    for name in (b"!\xff", b"!\xfe"):
        os.close(os.open(bytes(big) + b"/" + name, os.O_CREAT | os.O_WRONLY))
    listing = result(await call(files, "list_files", {"path": "big"}))
    expected = [f"{i:05d}" for i in range(MAX_LISTED_ENTRIES)]
    expected[3] = "00003/"
    assert listing == {"path": "big", "entries": expected, "count": total + 2, "omitted": 5, "not_utf8": 2}
    assert f"more than {MAX_LISTED_ENTRIES} entries" in files.offered["list_files"].description
