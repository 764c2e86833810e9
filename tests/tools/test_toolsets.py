"""The built-in toolsets, driven through the real gate: Toolbox.check, then invoke."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tether.core import envelope
from tether.core.errors import ConfigurationError
from tether.core.machine import Accepted, PendingCall
from tether.core.messages import ToolCall
from tether.tools import Tool, Toolbox
from tether.toolsets import TOOLSETS, load_toolset, resolve_files_root
from tether.toolsets.files import files_tools


async def call(toolbox: Toolbox, name: str, arguments: str | dict[str, Any]) -> str:
    """The envelope the model would see for one call: a rejection, or the tool's result."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    decision = toolbox.check(ToolCall("call_1", name, text))
    if not isinstance(decision, Accepted):
        return envelope.error(decision.code, decision.message)
    assert decision.read_only, "every built-in tool only reads"
    pending = PendingCall(
        call_id="call_1",
        tool=name,
        arguments=decision.arguments,
        fingerprint=None,
        read_only=decision.read_only,
        execute=True,
    )
    return await toolbox.invoke(pending, "run_1")


def result(raw: str) -> Any:
    data = json.loads(raw)
    assert data["ok"] is True, raw
    return data["result"]


def error(raw: str, code: str) -> str:
    data = json.loads(raw)
    assert data["ok"] is False, raw
    assert data["error"]["code"] == code, raw
    return str(data["error"]["message"])


# --- calc --------------------------------------------------------------------


@pytest.fixture
def calc() -> Toolbox:
    return Toolbox(load_toolset("calc"))


async def test_multiply_works(calc: Toolbox) -> None:
    assert result(await call(calc, "multiply", {"a": 248, "b": -3})) == -744


async def test_bounds_are_inclusive(calc: Toolbox) -> None:
    raw = await call(calc, "multiply", {"a": 1_000_000, "b": -1_000_000})
    assert result(raw) == -1_000_000_000_000


async def test_divide_floors_and_refuses_zero(calc: Toolbox) -> None:
    assert result(await call(calc, "divide", {"a": -7, "b": 2})) == -4
    assert error(await call(calc, "divide", {"a": 7, "b": 0}), "tool_failed") == "cannot divide by zero"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"a": true, "b": 2}', "a: expected integer, got boolean"),
        ('{"a": 2, "b": "248"}', "b: expected integer, got string"),
        ('{"a": 1000001, "b": 2}', "a: must be <= 1000000"),
        ('{"a": 2, "b": -1000001}', "b: must be >= -1000000"),
        ('{"a": 2, "b": 3, "c": 4}', "unexpected field(s) 'c'"),
    ],
)
async def test_calc_rejects_invalid_arguments(calc: Toolbox, arguments: str, expected: str) -> None:
    assert expected in error(await call(calc, "multiply", arguments), "invalid_arguments")


# --- files -------------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A files root with a text file, a subdirectory, and symlinks leading out of it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET")
    root = tmp_path / "root"
    (root / "notes").mkdir(parents=True)
    (root / "hello.txt").write_text("hello, world\n")
    (root / "notes" / "todo.txt").write_text("- write tests\n")
    (root / "link.txt").symlink_to(outside / "secret.txt")
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    return root


@pytest.fixture
def files(root: Path) -> Toolbox:
    return Toolbox(files_tools(root))


async def test_read_file(files: Toolbox) -> None:
    assert result(await call(files, "read_file", {"path": "hello.txt"})) == "hello, world\n"
    assert result(await call(files, "read_file", {"path": "./notes/todo.txt"})) == "- write tests\n"


async def test_list_files_marks_directories_and_counts(files: Toolbox) -> None:
    listing = result(await call(files, "list_files", {}))
    # linkdir is a directory outside the root: listed, but not as a directory.
    assert listing == {
        "path": ".",
        "entries": ["hello.txt", "link.txt", "linkdir", "notes/"],
        "count": 4,
    }
    assert result(await call(files, "list_files", {"path": "notes"}))["entries"] == ["todo.txt"]


async def test_missing_file(files: Toolbox) -> None:
    assert error(await call(files, "read_file", {"path": "nope.txt"}), "tool_failed") == "no such file: nope.txt"


@pytest.mark.parametrize(
    ("tool", "path"),
    [
        ("read_file", "../outside/secret.txt"),
        ("read_file", "notes/../../outside/secret.txt"),
        ("read_file", "{outside}/secret.txt"),
        ("read_file", "link.txt"),
        ("read_file", "linkdir/secret.txt"),
        ("list_files", "linkdir"),
        ("list_files", ".."),
        ("list_files", "{outside}"),
    ],
)
async def test_paths_leading_out_are_refused(files: Toolbox, tmp_path: Path, tool: str, path: str) -> None:
    raw = await call(files, tool, {"path": path.format(outside=tmp_path / "outside")})
    error(raw, "tool_failed")
    assert str(tmp_path) not in raw
    assert "SECRET" not in raw


async def test_any_dotdot_is_refused_even_when_it_stays_inside(files: Toolbox) -> None:
    raw = await call(files, "read_file", {"path": "notes/../hello.txt"})
    assert error(raw, "tool_failed") == "path must not contain '..': notes/../hello.txt"


async def test_symlink_loop_is_refused(files: Toolbox, root: Path) -> None:
    (root / "loop").symlink_to(root / "loop")
    raw = await call(files, "read_file", {"path": "loop"})
    assert error(raw, "tool_failed").startswith(("invalid path", "path leads outside"))


async def test_symlink_inside_root_is_followed(files: Toolbox, root: Path) -> None:
    (root / "alias.txt").symlink_to(root / "hello.txt")
    assert result(await call(files, "read_file", {"path": "alias.txt"})) == "hello, world\n"


@pytest.mark.parametrize("content", [bytes(range(256)), b"caf\xe9", b"text\x00more"])
async def test_binary_or_non_utf8_file_is_refused(files: Toolbox, root: Path, content: bytes) -> None:
    (root / "blob.bin").write_bytes(content)
    assert error(await call(files, "read_file", {"path": "blob.bin"}), "tool_failed").startswith(
        "not a text file: blob.bin"
    )


async def test_large_file_is_cut_with_its_original_size(files: Toolbox, root: Path) -> None:
    limit = files.offered["read_file"].max_result_chars
    size = limit + 12_345
    (root / "big.txt").write_text("a" * (size - 1) + "Z")
    text = result(await call(files, "read_file", {"path": "big.txt"}))
    assert text.startswith("a" * limit)
    assert "Z" not in text
    assert text.endswith(f"[truncated: showing {limit} of {size} characters]")


async def test_directory_is_not_a_file(files: Toolbox) -> None:
    assert error(await call(files, "read_file", {"path": "notes"}), "tool_failed") == "not a file: notes"


async def test_names_that_are_not_utf8_are_left_out_and_counted(files: Toolbox, root: Path) -> None:
    # Linux names are bytes: these two decode to lone surrogates, which no path the model writes can hold.
    os.close(os.open(bytes(root / "notes") + b"/bad\xff.txt", os.O_CREAT | os.O_WRONLY))
    os.mkdir(bytes(root / "notes") + b"/dir\xfe")
    raw = await call(files, "list_files", {"path": "notes"})
    assert result(raw) == {"path": "notes", "entries": ["todo.txt"], "count": 3, "not_utf8": 2}
    assert "not UTF-8" in files.offered["list_files"].description


@pytest.fixture
def hard_linked(root: Path, tmp_path: Path) -> Path:
    """``secret.txt`` also lives in the root as ``notes/secret.txt``, with ``alias.txt`` a symlink to it."""
    os.link(tmp_path / "outside" / "secret.txt", root / "notes" / "secret.txt")
    (root / "alias.txt").symlink_to(root / "notes" / "secret.txt")
    return root


@pytest.mark.parametrize("path", ["notes/secret.txt", "alias.txt"])
async def test_a_file_with_other_hard_links_is_not_read(files: Toolbox, hard_linked: Path, path: str) -> None:
    raw = await call(files, "read_file", {"path": path})
    assert error(raw, "tool_failed") == f"not readable: {path} has other hard links"
    assert "SECRET" not in raw


async def test_a_listing_names_the_files_with_other_hard_links(files: Toolbox, hard_linked: Path) -> None:
    # link.txt leads to the same file outside the root: what it is there is not said.
    assert result(await call(files, "list_files", {})) == {
        "path": ".",
        "entries": ["alias.txt", "hello.txt", "link.txt", "linkdir", "notes/"],
        "count": 5,
        "hard_linked": ["alias.txt"],
    }
    assert result(await call(files, "list_files", {"path": "notes"})) == {
        "path": "notes",
        "entries": ["secret.txt", "todo.txt"],
        "count": 2,
        "hard_linked": ["secret.txt"],
    }


async def test_two_names_for_one_file_inside_the_root_are_both_refused(files: Toolbox, root: Path) -> None:
    # The other link could as well be outside the root: a link does not say where the others are.
    os.link(root / "hello.txt", root / "notes" / "hello.txt")
    for path in ("hello.txt", "notes/hello.txt"):
        assert error(await call(files, "read_file", {"path": path}), "tool_failed") == (
            f"not readable: {path} has other hard links"
        )
    (root / "notes" / "hello.txt").unlink()
    assert result(await call(files, "read_file", {"path": "hello.txt"})) == "hello, world\n"


def test_files_root_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not a directory"):
        files_tools(tmp_path / "missing")


# --- clock -------------------------------------------------------------------


@pytest.fixture
def clock() -> Toolbox:
    return Toolbox(load_toolset("clock"))


@pytest.mark.parametrize(("zone", "offsets"), [("Europe/Paris", {"+01:00", "+02:00"}), ("UTC", {"+00:00"})])
async def test_current_time_states_its_zone(clock: Toolbox, zone: str, offsets: set[str]) -> None:
    now = result(await call(clock, "current_time", {"timezone": zone}))
    assert now["timezone"] == zone
    assert now["utc_offset"] in offsets
    parsed = datetime.fromisoformat(now["time"])
    assert parsed.isoformat().endswith(now["utc_offset"])


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "Europe", "localtime", "posixrules"])
async def test_unknown_zone_is_refused(clock: Toolbox, zone: str) -> None:
    message = error(await call(clock, "current_time", {"timezone": zone}), "tool_failed")
    assert message == f"unknown time zone: {zone}"


@pytest.mark.parametrize(
    ("arguments", "expected"), [({}, "'timezone' is required"), ({"timezone": "../x"}, "must match")]
)
async def test_zone_is_required_and_checked_by_the_schema(
    clock: Toolbox, arguments: dict[str, Any], expected: str
) -> None:
    assert expected in error(await call(clock, "current_time", arguments), "invalid_arguments")


# --- load_toolset ------------------------------------------------------------


def names(tools: list[Tool]) -> list[str]:
    return [t.name for t in tools]


def test_short_names(tmp_path: Path) -> None:
    assert sorted(TOOLSETS) == ["calc", "clock", "files"]
    assert names(load_toolset("calc")) == ["add", "subtract", "multiply", "divide"]
    assert names(load_toolset("clock")) == ["current_time"]
    assert names(load_toolset("files", files_root=str(tmp_path))) == ["read_file", "list_files"]


def test_builtins_fit_in_one_toolbox(tmp_path: Path) -> None:
    tools = [t for n in TOOLSETS for t in load_toolset(n, files_root=str(tmp_path))]
    assert len(Toolbox(tools).offered) == 7


def test_files_root_from_flag_then_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_FILES_ROOT", str(tmp_path / "env"))
    assert resolve_files_root("flag") == Path("flag")
    assert resolve_files_root(None) == tmp_path / "env"
    monkeypatch.delenv("TETHER_FILES_ROOT")
    with pytest.raises(ConfigurationError, match="set --files-root or TETHER_FILES_ROOT"):
        load_toolset("files")


def test_module_path_and_attribute() -> None:
    assert names(load_toolset("tether.toolsets.calc")) == ["add", "subtract", "multiply", "divide"]
    assert names(load_toolset("tether.toolsets.clock:TOOLS")) == ["current_time"]
    assert names(load_toolset("tether.toolsets.calc:multiply")) == ["multiply"]


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def test_module_tools_in_definition_order(module_dir: Path) -> None:
    source = """
        from tether.tools import tool

        @tool(read_only=True)
        def zeta() -> int:
            return 1

        @tool
        def alpha() -> int:
            return 2

        again = zeta  # an alias is not a second tool
        NOT_A_TOOL = 3
    """
    (module_dir / "my_toolset_mod.py").write_text(textwrap.dedent(source))
    assert names(load_toolset("my_toolset_mod")) == ["zeta", "alpha"]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("nonesuch", "unknown toolset 'nonesuch'"),
        ("tether.nonesuch", "unknown toolset 'tether.nonesuch'"),
        ("json", "toolset 'json' has no tools"),
        ("tether.toolsets.calc:LIMIT", "is not a Tool or a list of Tools"),
        ("tether.toolsets.calc:missing", "is not a Tool or a list of Tools"),
    ],
)
def test_bad_toolset_names(spec: str, expected: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        load_toolset(spec)
    message = str(raised.value)
    assert expected in message
    assert "built-in toolsets: calc, clock, files" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import no_such_dependency_xyz\n", "No module named 'no_such_dependency_xyz'"),
        ("raise RuntimeError('boom\\nsecond line')\n", "RuntimeError: boom"),
    ],
)
def test_import_failure_is_a_configuration_error(module_dir: Path, source: str, expected: str) -> None:
    (module_dir / "broken_toolset_mod.py").write_text(source)
    with pytest.raises(ConfigurationError, match="cannot import toolset module 'broken_toolset_mod'") as raised:
        load_toolset("broken_toolset_mod")
    assert expected in str(raised.value)
    assert "\n" not in str(raised.value)
