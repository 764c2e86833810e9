"""Shared paths: the fixtures live beside the repository, in ../shared/fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures"
RECORDED_OPENAI = FIXTURES / "recorded" / "openai_chat.jsonl"
RECORDED_ANTHROPIC = FIXTURES / "recorded" / "anthropic_messages.jsonl"
RECORDED_RESPONSES = FIXTURES / "recorded" / "openai_responses.jsonl"


@pytest.fixture(scope="session")
def recorded_openai() -> Path:
    if not RECORDED_OPENAI.exists():
        pytest.fail(f"fixture missing: {RECORDED_OPENAI} (tests read ../shared/fixtures in place)")
    return RECORDED_OPENAI


@pytest.fixture(scope="session")
def recorded_anthropic() -> Path:
    if not RECORDED_ANTHROPIC.exists():
        pytest.fail(f"fixture missing: {RECORDED_ANTHROPIC} (tests read ../shared/fixtures in place)")
    return RECORDED_ANTHROPIC


@pytest.fixture(scope="session")
def recorded_responses() -> Path:
    if not RECORDED_RESPONSES.exists():
        pytest.fail(f"fixture missing: {RECORDED_RESPONSES} (tests read ../shared/fixtures in place)")
    return RECORDED_RESPONSES


@pytest.fixture(scope="session", autouse=True)
def private_run_store(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Runs recorded by the tests (and CLI subprocesses) never reach the developer's own store."""
    import os

    os.environ["XDG_DATA_HOME"] = str(tmp_path_factory.mktemp("xdg-data"))
    os.environ.pop("TETHER_DB", None)
