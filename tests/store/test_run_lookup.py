"""Finding runs by a prefix of their id, and the prompts a run's logging lets `runs list` show."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.core.budget import RunConfig
from tether.core.machine import RunState
from tether.core.messages import Message
from tether.store import AmbiguousRun, RunNotFound, RunStore, SQLiteStore
from tether.tools import Principal


def add_run(store: RunStore, run_id: str, prompt: str = "hello") -> None:
    state = RunState(
        run_id=run_id, config=RunConfig(), messages=[Message("system", "be brief"), Message("user", prompt)]
    )
    store.create_run(state, Principal("alice"), {})
    store.checkpoint(state, release=True)


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    store = SQLiteStore(tmp_path / "runs.db")
    for run_id in ("abc1", "abc2", "abd", "a%c", "a_c", "zz"):
        add_run(store, run_id)
    return store


def test_a_unique_prefix_or_a_whole_id_names_one_run(store: RunStore) -> None:
    assert store.resolve("abd") == "abd"
    assert store.resolve("abc1") == "abc1"
    assert store.resolve("z") == "zz"


def test_an_ambiguous_prefix_names_the_candidates(store: RunStore) -> None:
    with pytest.raises(AmbiguousRun, match=r"run id prefix abc is ambiguous: it starts abc1, abc2; give more") as err:
        store.resolve("abc")
    assert err.value.exit_code == 3


def test_sql_wildcards_in_a_prefix_are_plain_characters(store: RunStore) -> None:
    assert store.resolve("a%") == "a%c"
    assert store.resolve("a_") == "a_c"
    with pytest.raises(RunNotFound, match=r"no run a\. in"):
        store.resolve("a.")


@pytest.mark.parametrize("prefix", ["", "q", "abc12"])
def test_no_match_is_run_not_found(store: RunStore, prefix: str) -> None:
    with pytest.raises(RunNotFound):
        store.resolve(prefix)


def test_prompts_are_given_only_for_runs_that_log_content(tmp_path: Path) -> None:
    quiet = SQLiteStore(tmp_path / "runs.db")
    add_run(quiet, "quiet", "keep me private")
    loud = SQLiteStore(tmp_path / "runs.db", log_content=True)
    add_run(loud, "loud", "What is 6 times 7?\nThanks")

    assert loud.logged_prompts(["quiet", "loud", "missing"]) == {"loud": "What is 6 times 7?\nThanks"}
    assert quiet.load("loud").setup == {"log_content": True}
    assert quiet.load("quiet").setup == {"log_content": False}
