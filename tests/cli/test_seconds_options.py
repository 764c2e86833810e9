"""``tether worker --heartbeat/--lease-seconds`` and ``tether serve --lease-seconds``: in the help, and a value
that is not a number of seconds above 0 is a usage error (exit 2) naming the option, before anything starts."""

from __future__ import annotations

import pytest
from cli_helpers import clean_env, tether

OPTIONS = [("worker", "--heartbeat"), ("worker", "--lease-seconds"), ("serve", "--lease-seconds")]
# Without a Temporal server: the option is refused before the worker would look for one.
ARGS = {"worker": ["--temporal", "127.0.0.1:1"], "serve": []}


@pytest.mark.parametrize(("command", "option"), OPTIONS)
def test_the_options_are_in_the_help(command: str, option: str) -> None:
    done = tether(command, "--help")
    assert done.code == 0, done
    assert f"{option} SECONDS" in done.out


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("0", "0 is not a number of seconds above 0"),
        ("-1", "-1 is not a number of seconds above 0"),
        ("nan", "nan is not a number of seconds above 0"),
        ("inf", "inf is not a number of seconds above 0"),
        ("ten", "'ten' is not a valid float"),
    ],
)
@pytest.mark.parametrize(("command", "option"), OPTIONS)
def test_a_bad_number_of_seconds_is_a_usage_error(command: str, option: str, value: str, says: str) -> None:
    done = tether(command, option, value, *ARGS[command])
    assert done.code == 2, done
    assert f"Invalid value for '{option}': {says}" in done.err


def test_a_worker_lease_longer_than_a_save_waits_is_refused() -> None:
    done = tether("worker", "--lease-seconds", "61", *ARGS["worker"])
    assert done.code == 2, done
    assert "Invalid value for '--lease-seconds': 61 is more than 60 seconds" in done.err


def test_the_worker_reads_a_bad_lease_from_the_environment_as_a_usage_error() -> None:
    done = tether("worker", *ARGS["worker"], env=clean_env(TETHER_LEASE_SECONDS="soon"))
    assert done.code == 2, done
    assert "Invalid value for '--lease-seconds'" in done.err and "'soon' is not a valid float" in done.err
