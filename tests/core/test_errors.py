"""The error tree is in one place: every ``TetherError`` subclass in ``tether.core.errors``, in its documented tree."""

from __future__ import annotations

import importlib
import pkgutil

import tether
from tether.core import errors


def every_subclass() -> list[type[errors.TetherError]]:
    for found in pkgutil.walk_packages(tether.__path__, "tether."):
        if not found.name.endswith("__main__"):  # running it would start the CLI
            importlib.import_module(found.name)
    classes = [errors.TetherError]
    for cls in classes:  # tether's own: an application may subclass them (the ticket example's TicketsDBError)
        classes.extend(c for c in cls.__subclasses__() if c.__module__.startswith("tether."))
    return classes


def test_an_application_may_subclass_tethers_errors_outside_the_tree() -> None:
    class AppError(errors.TetherError):
        """An application's own error."""

    assert AppError not in every_subclass() and "AppError" not in errors.tree()


def test_every_error_class_lives_in_core_errors() -> None:
    elsewhere = [f"{c.__module__}.{c.__qualname__}" for c in every_subclass() if c.__module__ != errors.__name__]
    assert elsewhere == [], "define these in tether.core.errors (and keep a name where they were, if public)"


def test_the_documented_tree_is_the_tree_of_the_classes() -> None:
    every_subclass()
    documented = "\n".join(line.removeprefix("    ") for line in (errors.__doc__ or "").splitlines())
    assert errors.tree() in documented, "paste tether.core.errors.tree() into the module's docstring"


def test_each_error_says_what_it_is_and_has_an_exit_code() -> None:
    for cls in every_subclass():
        assert (cls.__doc__ or "").strip(), f"{cls.__name__} has no docstring"
        assert isinstance(cls.exit_code, int) and 0 < cls.exit_code < 128, cls
