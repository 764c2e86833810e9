"""A faster ``__init__`` for the frozen dataclasses a run makes dozens of.

A frozen dataclass's generated ``__init__`` sets each field with
``object.__setattr__(self, name, value)``, about 100 ns a field here, so a
``ModelReply`` of nine fields costs a microsecond to make before anything is
done with it; a run makes about thirty such records (its messages, requests,
replies, the machine's events and commands). With ``slots=True`` each field
is a slot whose own setter takes half that. ``quick_init`` gives a class an
``__init__`` that calls those setters: the same parameters, defaults and
default factories, the instance still frozen (assignment still raises
``FrozenInstanceError``), and about half the cost (issue 19: ``bench/calls.py``,
``bench/overhead.py``).

Applied above the dataclass decorator::

    @quick_init
    @dataclass(frozen=True, slots=True)
    class Usage: ...

A class it cannot rewrite faithfully (a field outside ``__init__`` or
keyword-only, a ``__post_init__``, no slots) is returned as it is.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any, TypeVar

C = TypeVar("C", bound=type)


def quick_init(cls: C) -> C:
    """``cls`` (a frozen dataclass with slots) with an ``__init__`` that sets its slots directly."""
    found = fields(cls)
    if hasattr(cls, "__post_init__") or "__slots__" not in cls.__dict__:
        return cls
    if any(not f.init or f.kw_only for f in found):
        return cls
    names: dict[str, Any] = {"_MISSING": MISSING}
    params, body = [], []
    for f in found:
        names[f"_set_{f.name}"] = cls.__dict__[f.name].__set__  # the slot's member descriptor
        if f.default is not MISSING:
            names[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not MISSING:
            names[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_MISSING")
            body.append(f"    if {f.name} is _MISSING:\n        {f.name} = _factory_{f.name}()")
        else:
            params.append(f.name)
        body.append(f"    _set_{f.name}(self, {f.name})")
    source = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body or ["    pass"])
    exec(source, names)  # the text is built above from the field names only, as dataclasses builds its own
    init = names["__init__"]
    init.__qualname__, init.__module__ = f"{cls.__qualname__}.__init__", cls.__module__
    generated = cls.__dict__["__init__"]  # the dataclass's own
    init.__doc__, init.__annotations__ = generated.__doc__, dict(generated.__annotations__)
    setattr(cls, "__init__", init)  # noqa: B010  (mypy refuses the assignment to a class's __init__)
    return cls
