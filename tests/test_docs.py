"""Docs derived from code stay in step with it, and the public surface is explicit."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generate", REPO / "docs" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_docs_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "docs" / "generate.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_public_surface() -> None:
    import tether

    for name in tether.__all__:
        assert getattr(tether, name) is not None
    assert "Agent" in tether.__all__ and "tool" in tether.__all__


def test_a_changed_generated_page_is_reported_stale(tmp_path: Path) -> None:
    generate = load_generator()
    made = generate.pages()
    for name, text in made.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert generate.stale_pages(tmp_path, made) == []
    (tmp_path / "reference" / "environment.md").write_text(made["reference/environment.md"].replace("TETHER_DB", "X"))
    (tmp_path / "reference" / "http-api.md").unlink()
    assert generate.stale_pages(tmp_path, made) == ["reference/environment.md", "reference/http-api.md"]


@pytest.mark.parametrize(
    ("code", "found"),
    [
        ('os.environ.get("TETHER_BRAND_NEW")', {"TETHER_BRAND_NEW"}),
        ('os.getenv("OPENAI_ORGANIZATION", "")', {"OPENAI_ORGANIZATION"}),
        ('os.environ["HOME_OF_THINGS"]', {"HOME_OF_THINGS"}),
        ('click.option("--region", envvar="ANTHROPIC_REGION")', {"ANTHROPIC_REGION"}),
        ('os.environ.get(f"{env_prefix(None, None)}_ORG_ID")', {"OPENAI_ORG_ID", "ANTHROPIC_ORG_ID"}),
        ('REGION_ENV = "TETHER_REGION"', {"TETHER_REGION"}),
    ],
)
def test_a_new_environment_variable_stops_the_generator(tmp_path: Path, code: str, found: set[str]) -> None:
    """However the code reads a variable, the scan finds it, and one without a description is an error."""
    generate = load_generator()
    src = tmp_path / "tether"
    shutil.copytree(REPO / "src" / "tether", src)
    assert generate.environment_reference(src) == generate.environment_reference()  # the copy reads the same
    (src / "cli" / "new_thing.py").write_text(f"import os\n\nimport click\n\n{code}\n")
    with pytest.raises(generate.Undescribed) as raised:
        generate.environment_reference(src)
    message = str(raised.value)
    assert all(name in message for name in found), message
    assert "add them to ENVIRONMENT" in message


def test_a_variable_no_longer_read_stops_the_generator(tmp_path: Path) -> None:
    generate = load_generator()
    src = tmp_path / "tether"
    shutil.copytree(REPO / "src" / "tether", src)
    (src / "eval" / "progress.py").write_text((src / "eval" / "progress.py").read_text().replace('"CI"', '"NOT_CI"'))
    with pytest.raises(generate.Undescribed, match="NOT_CI"):  # the new name is not described
        generate.environment_reference(src)
    (src / "eval" / "progress.py").write_text("")
    with pytest.raises(generate.Undescribed, match="describes CI, which no code under src/ reads"):
        generate.environment_reference(src)


def test_the_generator_exits_2_naming_what_it_cannot_describe(tmp_path: Path) -> None:
    """``python docs/generate.py`` (and ``--check``) fail loudly, not with a traceback, on an undescribed variable."""
    shim = tmp_path / "docs_generate_shim.py"
    shim.write_text(
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('g', {str(REPO / 'docs' / 'generate.py')!r})\n"
        "g = importlib.util.module_from_spec(spec); spec.loader.exec_module(g)\n"
        "del g.ENVIRONMENT['TETHER_DB']  # as if the code had started reading it\n"
        "sys.argv = ['generate.py', '--check']\n"
        "sys.exit(g.main())\n"
    )
    result = subprocess.run([sys.executable, str(shim)], capture_output=True, text=True)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no description for the environment variable(s) TETHER_DB" in result.stderr
    assert "Traceback" not in result.stderr


def test_every_file_the_site_names_exists() -> None:
    """A page that says which test holds a guarantee, or which bench measures it, names a file that is there."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    named = {
        (page.relative_to(REPO).as_posix(), path)
        for page in pages
        for path in re.findall(r"`((?:tests|bench|src|examples|docs)/[\w./-]+)`", page.read_text())
    }
    assert len(named) > 20  # the security page alone names a dozen tests
    missing = sorted((page, path) for page, path in named if not (REPO / path.rstrip("/")).exists())
    assert missing == [], "(page, path)"
