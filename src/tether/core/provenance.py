"""Argument provenance: where each sink value of a call could have come from (DESIGN.md §7).

A tool may name its *sink* parameters (``@tool(sinks=("recipients",))``).
In a tainted run, a side-effecting call of such a tool runs without approval
only when every string or number in every sink parameter's value is traced,
by the host, to *trusted* text of the run's transcript:

- trusted: the principal's own messages (the prompt, earlier turns' user
  messages), the system message, the run's fixed instructions, and results
  of tools not marked as returning others' text;
- untrusted: results the run marks untrusted (``untrusted_output`` tools,
  ``ToolContext.mark_untrusted()``, a history read back without marks);
- nowhere: the model's own writing (its text, its calls' arguments, and the
  corrections the machine sends back quoting its answer are never sources).

The tool's own fixed configuration is trusted too, for its own calls: what
its parameters' schema fixes (``schema_fixed``): the values it allows or
defaults to (``enum``, ``const``, ``default``) and the names of its
properties (a key of an object in a sink value, ``{"type": "file"}``, is
then not the model's choice). Matched whole, not as a substring; a tool whose
schema someone else wrote (an MCP server's, ``Tool.described_by``) fixes
nothing.

Rules of the trace, each chosen to fail closed:

- A value is traced to one text when it equals it or is a substring of it,
  both normalised the same way: Unicode NFKC, case folded, runs of
  whitespace made one space, percent-decoding with ``+`` as a space
  (repeated, at most three times), curly quotes straight and a quote
  written doubled (YAML's and SQL's escape inside a quoted string: ``''``)
  one quote. A value assembled from pieces of several
  texts is traced to none of them.
- A value that appears in trusted text is trusted even if it also appears in
  untrusted text: an injection that reuses a value the principal gave is not
  a new sink value.
- A tool result does not vouch for the call's own arguments: a value found in
  a trusted result only where the result repeats what the call was asked
  (an error echoing a bad argument, say) is not traced there; a value
  shorter than three characters is an echo only as a whole word of the
  arguments (id ``24`` found by a search for the day ``2024-05-15`` is not).
- Numbers are matched as their decimal text (``42``, ``12.5``; ``3.0`` as
  ``3``). A value shorter than three characters must appear as a whole word
  of a tool result, or be a whole message: in prose (the prompt, the system
  message, the instructions) a number of one or two digits is a day, an hour
  or a count ("June 13") as often as a reference, so file ``13`` is not
  traced to it. An empty string carries nothing and counts as traced. Booleans and nulls
  are not values to trace.
- A tool result's text is the strings, keys and numbers of its JSON (not the
  envelope's punctuation), kept as one text; text inside it that imitates a
  message, an approval or an envelope is only text of that result.

Per-field provenance: an untrusted result may mix facts the system vouches
for (the id it assigned, an amount, a timestamp) with text others wrote
freely (a body, a subject, a description). Who sent a record is authentic but
not vouched for: whoever sent it chose it. A tool names the former with
``@tool(untrusted_output=True, trusted_fields=("id_", "timestamp"))``; when the
transcript is indexed, the values of those fields in each of its results
(``field_values``) are added as a second, trusted text of that result, and
the result's whole text stays untrusted (it still taints the run). The
rules, each chosen to fail closed:

- A field name is a key of the result's *record*: the result itself when it
  is an object, each item when it is a list (lists are walked, at any depth);
  ``"a.b"`` names key ``b`` of the object under key ``a``. A key deeper than
  the path says is not matched: an event attached to an email is its
  sender's record, not the mail system's, so the email's ``id_`` is not the
  attachment's ``id_``.
- Only a string or a number at that place is trusted, or each string and
  number of a list there. An object there is refused (nothing of it, keys
  nor values, is trusted): it holds fields of its own, which may be free
  text; name them by path instead.
- Only the JSON structure counts: text inside a string that imitates a
  field (an email body saying ``"sender": "x"``) is part of that string, so
  it stays untrusted. Only the result of an ``ok`` envelope is read; an
  error's message is not a field.
- The fields are kept with the run's state per call (``RunState.vouched``),
  so a resumed run indexes its transcript, and traces a call, exactly as
  before (a sub-agent traces through its parent's index, fields and all).
  A conversation's next turn sees an earlier turn's result wholly
  untrusted: its fields are not passed on.
- The trusted text of a result, like a trusted tool's, does not vouch for
  the call's own arguments (an id the call searched for, echoed back).
- A true fact is not a choice: an injection can name a real id to act on
  (the file to delete) as easily as a made-up one. A tool's
  ``principal_sinks`` (some of its sinks) must therefore be traced to the
  principal's own text, or the host's, or a trusted tool's result; a value
  found only in a vouched field counts there as found in untrusted text.

Cost: each text is indexed once, when the run's transcript grows (trigrams
and short words mapped to the texts holding them); a value is looked up in
the postings of its rarest trigram, so a call's trace does not rescan the
transcript.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import unquote_plus

from tether.core import nesting
from tether.core.messages import Message
from tether.core.redact import REDACTED, redact_text, secret_key

TRUSTED = "trusted"
UNTRUSTED = "untrusted"
NOWHERE = "nowhere"

VOUCHED, PRINCIPAL = 1, 2  # trust levels: a field an untrusted result vouches for; the principal's or the host's text
SHORT = 3  # a value shorter than this must appear as a whole word
_SPACES = re.compile(r"\s+")
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201b": "'", "\u201c": '"', "\u201d": '"'})
_WORDS = re.compile(r"\w+")
_SEP = "\x00"  # between the leaves of one result: never whitespace, never in a normalised value
_SHOWN = 80  # how much of a value a reason shows
# The corrections the machine writes as user messages (``Run._judge_text_answer``, ``Run._refuse_answer``): they
# quote the model's answer or a validator's words about it, so they are the model's text, not the principal's.
CORRECTIONS = ("Your final answer is invalid (", "Your final answer was refused: ")


def normalise(text: str) -> str:
    """``text`` as compared: NFKC, case folded, percent-decoded, quotes straight and undoubled, spaces squeezed."""
    for _ in range(3):  # twice-encoded still found; bounded, so a crafted text costs little
        decoded = unquote_plus(text) if ("%" in text or "+" in text) else text
        if decoded == text:
            break
        text = decoded
    text = unicodedata.normalize("NFKC", text).casefold().replace(_SEP, " ").translate(_QUOTES)
    text = text.replace("''", "'")  # a result printed as YAML quotes `grandma's` as 'grandma''s'
    return _SPACES.sub(" ", text).strip()


def number_text(value: int | float) -> str:
    """A number as the decimal text it is matched as."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value) if isinstance(value, int) else repr(value)


def leaves(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(path, text) for every string and number in ``value``, lists and dicts walked (keys too)."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, int | float):
        yield path, number_text(value)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from leaves(item, f"{path}[{i}]")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield f"{path}.{key}{KEY}", str(key)  # a key is a value the model chose too
            yield from leaves(item, f"{path}.{key}")


KEY = " (the key)"  # how ``leaves`` marks the path of a key

Fixed = tuple[frozenset[str], frozenset[str]]  # what a tool's schema fixes, normalised: (values, property names)
NOTHING_FIXED: Fixed = (frozenset(), frozenset())
_FIXING = ("enum", "const", "default")


def schema_fixed(schema: Any) -> Fixed:
    """The values a JSON schema allows or defaults to (``enum``, ``const``, ``default``, at any depth) and the
    names of the properties it declares, normalised as traced values are: the tool's fixed configuration."""
    values: set[str] = set()
    keys: set[str] = set()

    def walk(node: Any, depth: int) -> None:
        if depth > nesting.MAX_DEPTH:
            return  # deeper than any value a call could carry
        if isinstance(node, list):
            for item in node:
                walk(item, depth + 1)
            return
        if not isinstance(node, Mapping):
            return
        for word, value in node.items():
            if word in _FIXING:
                for _, text in leaves(value if word == "enum" else [value], ""):
                    values.add(normalise(text))
            elif word == "properties" and isinstance(value, Mapping):
                keys.update(normalise(str(name)) for name in value)
                for item in value.values():
                    walk(item, depth + 1)
            else:
                walk(value, depth + 1)

    walk(schema, 0)
    values.discard("")
    keys.discard("")
    return frozenset(values), frozenset(keys)


def _result_parts(content: str) -> list[str]:
    """The text of a tool message: its JSON's strings, keys and numbers, or the content itself if not JSON."""
    try:
        data = nesting.loads(content, nesting.MAX_REPLY_DEPTH)
    except ValueError:
        return [content]
    return [text for _, text in leaves(data, "")]


def field_values(result: Any, fields: Sequence[str]) -> list[str]:
    """The text of each trusted field of ``result`` (a tool's result, parsed JSON), as the module's rules say."""
    found: list[str] = []
    for name in fields:
        _field(result, name.split("."), found)
    return found


def _field(value: Any, path: Sequence[str], found: list[str]) -> None:
    if isinstance(value, list | tuple):  # a list of records, or of values at the end of the path: each item
        for item in value:
            _field(item, path, found)
    elif not path:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            found.append(value if isinstance(value, str) else number_text(value))
        # an object (or a null, a boolean) where a value was named: refused, nothing of it is trusted
    elif isinstance(value, Mapping) and path[0] in value:
        _field(value[path[0]], path[1:], found)


def _vouched_parts(content: str, fields: Sequence[str]) -> list[str]:
    """The trusted fields' text in a tool message: only in the result of an ``ok`` envelope, else nothing."""
    try:
        data = nesting.loads(content, nesting.MAX_REPLY_DEPTH)
    except ValueError:
        return []
    if not isinstance(data, Mapping) or data.get("ok") is not True:
        return []
    return field_values(data.get("result"), fields)


def _echoed(value: str, echo: str) -> bool:
    """Whether ``value`` is in the arguments ``echo``: a short value only as a whole word of them (``24`` is not
    in the day ``2024-05-15``)."""
    if len(value) < SHORT:
        return value in {*_WORDS.findall(echo), *echo.replace(_SEP, " ").split(" ")}
    return value in echo


class TextIndex:
    """Texts, each trusted or not, indexed so that a value is found without reading them all.

    Postings: every trigram of a text, and every short word (fewer than
    ``SHORT`` characters), maps to the ids of the texts holding it, in the
    order they were added.
    """

    def __init__(self) -> None:
        self.texts: list[tuple[str, int, str, str]] = []  # (normalised text, trust level, label, echo)
        self._grams: dict[str, list[int]] = {}
        self._short: dict[str, list[int]] = {}

    def add(
        self,
        parts: Sequence[str],
        trusted: bool,
        label: str,
        echo: Sequence[str] = (),
        prose: bool = False,
        vouched: bool = False,
    ) -> None:
        """Index the text made of ``parts`` (a value is found within one part).

        ``echo``: the arguments of the call a result answers; a value found
        in the result that is also among them does not count as traced there.
        ``prose``: a message, not a result: a short value is found in it only
        when it is the whole message. ``vouched``: trusted fields of an
        untrusted result: trusted, but not the principal's word.
        """
        norm = _SEP.join(filter(None, map(normalise, parts)))
        if not norm:
            return
        tid = len(self.texts)
        level = (VOUCHED if vouched else PRINCIPAL) if trusted else 0
        self.texts.append((norm, level, label, _SEP.join(map(normalise, echo))))
        for gram in {norm[i : i + SHORT] for i in range(len(norm) - SHORT + 1)}:
            self._grams.setdefault(gram, []).append(tid)
        words = {norm} if prose else {*_WORDS.findall(norm), *norm.replace(_SEP, " ").split(" ")}
        for word in {w for w in words if 0 < len(w) < SHORT}:
            self._short.setdefault(word, []).append(tid)

    def find(self, value: str, needs: int = VOUCHED) -> tuple[bool, list[str]]:
        """Whether normalised ``value`` is in a text trusted at level ``needs`` (``PRINCIPAL``: not a vouched
        field), and the labels of the other texts holding it."""
        if len(value) < SHORT:
            candidates: Sequence[int] = self._short.get(value, ())
        else:
            postings = []
            for i in range(len(value) - SHORT + 1):
                found = self._grams.get(value[i : i + SHORT])
                if found is None:
                    return False, []  # a trigram no text holds: no text holds the value
                postings.append(found)
            candidates = min(postings, key=len)
        untrusted: list[str] = []
        for tid in candidates:
            text, level, label, echo = self.texts[tid]
            if len(value) >= SHORT and value not in text:
                continue
            if level and echo and _echoed(value, echo):
                continue  # a result does not vouch for its own call's arguments
            if level >= needs:
                return True, []
            if label not in untrusted:
                untrusted.append(label)
        return False, untrusted


class Provenance:
    """The index of one run's transcript, kept up to date as messages are added (``sync``).

    ``outer`` (``inherit``): the index of the run that started this one (a
    sub-agent's parent); its trusted text is trusted here too, and this
    run's own user messages are the parent model's writing, not the
    principal's: not trusted text.
    """

    def __init__(self) -> None:
        self.index = TextIndex()
        self.outer: Provenance | None = None
        self._outer_transcript: tuple[Sequence[Message], Mapping[str, str], Mapping[str, Sequence[str]]] = ((), {}, {})
        self._seen = 0  # messages indexed so far
        self._calls: dict[str, tuple[str, str]] = {}  # call id -> (tool, arguments), from the assistant messages
        self._host: set[str] = set()  # host texts (instructions) added
        self._prompts = 0

    def inherit(
        self,
        outer: Provenance,
        messages: Sequence[Message],
        untrusted: Mapping[str, str],
        vouched: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """Trace through the index ``outer`` of the parent run whose transcript is ``messages`` (live, not copied)."""
        self.outer, self._outer_transcript = outer, (messages, untrusted, {} if vouched is None else vouched)

    def host_text(self, text: str) -> None:
        """Add text the host wrote outside the transcript (a run's fixed instructions) as trusted, once."""
        if text not in self._host:
            self._host.add(text)
            self.index.add([text], True, "the instructions", prose=True)

    def sync(
        self,
        messages: Sequence[Message],
        untrusted: Mapping[str, str],
        vouched: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """Index the messages added since the last call (the transcript only grows).

        ``vouched``: call id -> the trusted fields of its untrusted result (``RunState.vouched``).
        """
        if len(messages) < self._seen:  # not expected: a transcript rewritten is indexed afresh
            self.index, self._seen, self._calls, self._prompts = TextIndex(), 0, {}, 0
            for text in sorted(self._host):
                self.index.add([text], True, "the instructions", prose=True)
        for position in range(self._seen, len(messages)):
            self._add(position, messages[position], untrusted, vouched or {})
        self._seen = len(messages)

    def _add(
        self, position: int, message: Message, untrusted: Mapping[str, str], vouched: Mapping[str, Sequence[str]]
    ) -> None:
        if message.role == "assistant":
            for call in message.tool_calls:
                self._calls[call.id] = (call.name, call.arguments)
            return  # the model's own writing is no source
        content = message.content or ""
        if message.role == "system":
            self.index.add([content], True, "the system message", prose=True)
        elif message.role == "user" and not content.startswith(CORRECTIONS):
            self._prompts += 1
            if self.outer is None:
                self.index.add([content], True, f"the principal's message {self._prompts}", prose=True)
            else:
                self.index.add([content], False, "the prompt the parent run's model wrote", prose=True)
        elif message.role == "tool":
            call_id = message.tool_call_id or ""
            tool, arguments = self._calls.get(call_id, (untrusted.get(call_id, "a tool"), ""))
            trusted = call_id not in untrusted
            echo = _result_parts(arguments) if arguments else []
            self.index.add(_result_parts(content), trusted, f"the result of {tool} {call_id}", echo)
            fields = vouched.get(call_id, ())
            if not trusted and fields:  # the facts the system vouches for in it: a second text, trusted
                label = f"the trusted fields of the result of {tool} {call_id} (not the principal's word)"
                self.index.add(_vouched_parts(content, fields), True, label, echo, vouched=True)

    def find(self, value: str, needs: int = VOUCHED) -> tuple[bool, list[str]]:
        trusted, where = self.index.find(value, needs)
        if not trusted and self.outer is not None:
            self.outer.sync(*self._outer_transcript)
            outer_trusted, outer_where = self.outer.find(value, needs)
            if outer_trusted:
                return True, []
            where += [f"{label} (in the parent run)" for label in outer_where]
        return trusted, where

    def trace(
        self,
        sinks: Sequence[str],
        arguments: Mapping[str, Any],
        principal: Collection[str] = (),
        fixed: Fixed = NOTHING_FIXED,
    ) -> list[dict[str, Any]]:
        """The verdict on each sink value of ``arguments``: its path, where it was found, and in which texts.

        A sink among ``principal`` needs the principal's own text: a trusted field of an untrusted result
        holding its value counts as untrusted text there. ``fixed``: what the tool's own schema fixes
        (``schema_fixed``), the host's text: a value or key equal to one of it is trusted, and its verdict says
        which (``"fixed"``), so that the same verdict can be reached again from what was used (``fixed_used``).
        """
        verdict: list[dict[str, Any]] = []
        for param in sorted(sinks):
            if param not in arguments:
                continue
            for path, raw in leaves(arguments[param], param):
                value = normalise(raw)
                if not value:
                    verdict.append({"path": path, "found": TRUSTED, "in": []})
                    continue
                if value in fixed[path.endswith(KEY)]:
                    verdict.append({"path": path, "found": TRUSTED, "in": [], "fixed": value})
                    continue
                trusted, where = self.find(value, PRINCIPAL if param in principal else VOUCHED)
                found = TRUSTED if trusted else (UNTRUSTED if where else NOWHERE)
                verdict.append({"path": path, "found": found, "in": where[:3]})
        return verdict


def fixed_for(fixed: Fixed, sinks: Collection[str], arguments: Mapping[str, Any]) -> Fixed:
    """The part of ``fixed`` the sink values of one call could be traced to: what a verdict sent elsewhere (a
    Temporal workflow's history) needs to carry, however long the schema's enums."""
    if not (fixed[0] or fixed[1]):
        return fixed
    values, keys = _by_kind(
        (normalise(raw), path) for p in sinks if p in arguments for path, raw in leaves(arguments[p], p)
    )
    return fixed[0] & values, fixed[1] & keys


def fixed_used(verdict: Sequence[Mapping[str, Any]]) -> Fixed:
    """The part of a tool's fixed configuration a verdict was traced to: all a later trace needs to agree."""
    return _by_kind((item["fixed"], item["path"]) for item in verdict if "fixed" in item)


def _by_kind(found: Iterable[tuple[str, str]]) -> Fixed:
    """(value, its path) pairs as ``Fixed``: the values, and the keys (a path ``leaves`` marks with ``KEY``)."""
    values: set[str] = set()
    keys: set[str] = set()
    for value, path in found:
        (keys if path.endswith(KEY) else values).add(value)
    return frozenset(values), frozenset(keys)


def untraced(verdict: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a verdict holds a sink value not traced to trusted text."""
    return any(item["found"] != TRUSTED for item in verdict)


def reasons(verdict: Sequence[Mapping[str, Any]], arguments: Mapping[str, Any]) -> list[str]:
    """Why each untraced sink value needs approval, naming the value and where it appears."""
    values = {path: raw for param in arguments for path, raw in leaves(arguments[param], param)}
    out = []
    for item in verdict:
        if item["found"] == TRUSTED:
            continue
        path = item["path"]
        raw = values.get(path, "")
        shown = REDACTED if _secret_path(path) else _shorten(redact_text(raw))
        if item["found"] == UNTRUSTED:
            out.append(f"{path} `{shown}` appears only in {' and '.join(item['in'])}")
        else:
            out.append(f"{path} `{shown}` appears nowhere in the run's text")
    return out


def _secret_path(path: str) -> bool:
    """Whether the value at ``path`` sits under a secret-looking key at any depth (``body.auth.password``, as
    ``redact`` hides it in the arguments beside the reason); a key's own name is shown unless a key above it is."""
    keys = path.removesuffix(KEY).split(".")
    return any(secret_key(key) for key in (keys[:-1] if path.endswith(KEY) else keys))


def _shorten(text: str) -> str:
    text = json.dumps(text, ensure_ascii=False)[1:-1] if any(c in text for c in "`\n\r") else text
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"
