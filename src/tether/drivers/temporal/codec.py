"""Temporal payloads encrypted by tether's clients and workers, so the server stores only ciphertext.

A run's history holds its prompt, the model's replies, every call's
arguments and result and what each save sends to the run store. With
``TETHER_TEMPORAL_KEY`` set, every payload a client or worker of ``connect``
sends is AES-256-GCM ciphertext (a fresh 96-bit nonce each) under the
variable's first key, marked ``binary/encrypted`` with that key's id; any of
its keys decrypts. Unset, payloads go as they always did.

Decoding, a process refuses (``KeyRefused``) what it cannot read or must not
trust, never passing it on: a payload under a key it does not hold (the key
id says which), an encrypted payload while it holds no key, one that fails
its authentication, and, while it holds a key, a payload written without one.
That last refusal is what makes the key an authentication too: whoever can
reach the Temporal server without the key (``temporal workflow update``, a
client without this codec) cannot send a decision, a signal or a run's input
that a worker takes for a key holder's. Nothing a process with the key writes
is refused so: every payload the SDK writes through the data converter, a
None (``binary/null``) too, is encrypted, and what it writes outside it (a
marker's own details, search attributes) is never decoded. A worker's refusal fails its workflow
task, which Temporal retries: the run waits, nothing of it runs, until a
worker that can read it takes it. An update sent without the key is then
refused to its sender and the run goes on; a signal stays in the history, so
the run waits until it is reset to before it (``docs/guides/temporal.md``).

The variable holds base64 keys of 32 bytes (``openssl rand -base64 32``),
separated by commas when old keys must still decrypt, and the entry
``plaintext`` after them reads payloads written without a key as they are,
for the runs started before the key was set (``KEY,plaintext``); drop it once
those have ended: while it is there, anyone without the key can write to any
run. ``cryptography`` is imported only when the variable is set.

With a key, a failure's message and stack trace are encrypted too (the SDK's
encoded attributes): a resolver's or a reconcile hook's exception, and the
reason of a run whose workflow failed, may quote what the run holds. Only
the codec's own refusal stays readable, so that a worker lacking the key can
say so to whoever reads the history: it names key ids or an encoding, nothing else.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter, DefaultFailureConverter, PayloadCodec

from tether.core.errors import ConfigurationError, KeyRefused

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_VARIABLE = "TETHER_TEMPORAL_KEY"
ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"  # the metadata entry naming the key a payload is encrypted under
KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12
PLAINTEXT = "plaintext"  # the entry of the variable that also reads payloads written without a key
HINT = f"give every client and worker of the task queue the same {KEY_VARIABLE}"


def key_id(key: bytes) -> str:
    """A key's public name in each payload it encrypts: says which key a payload needs, reveals nothing of it."""
    return hashlib.sha256(b"tether temporal key id\0" + key).hexdigest()[:16]


def parse_keys(text: str) -> tuple[list[bytes], bool]:
    """The keys of ``TETHER_TEMPORAL_KEY`` (base64 of 32 bytes each, comma-separated, the first the one that
    encrypts) and whether it reads payloads written without a key (its entry ``plaintext``, after a key).

    ``ConfigurationError`` names the entry at fault and why, never its text.
    """
    parts = [part.strip() for part in text.split(",")]
    if parts[0] == PLAINTEXT:
        raise ConfigurationError(
            f"{KEY_VARIABLE}: its first entry is `{PLAINTEXT}`, not a key: the first entry is the key that encrypts;"
            f" `{PLAINTEXT}` goes after the keys (KEY,{PLAINTEXT})"
        )
    keys = []
    for index, part in enumerate(parts):
        if part == PLAINTEXT:
            continue
        which = "its key" if len(parts) == 1 else f"its key #{index + 1}"
        try:
            key = base64.b64decode(part, validate=True) if part else b""
        except (binascii.Error, ValueError):
            key = None
        if key is None or len(key) != KEY_BYTES:
            why = "is empty" if not part else "is not base64" if key is None else f"decodes to {len(key)} bytes"
            raise ConfigurationError(
                f"{KEY_VARIABLE}: {which} {why}; each key is 32 random bytes in base64"
                f" (`openssl rand -base64 32`), several separated by commas, then optionally `{PLAINTEXT}`"
            )
        keys.append(key)
    return keys, PLAINTEXT in parts


class EncryptedFailures(DefaultFailureConverter):
    """Failures with their message and stack trace in the encoded attributes, which the codec encrypts; the codec's
    own refusal stays plain (a worker without the key could not write it for anyone to read otherwise)."""

    def __init__(self) -> None:
        super().__init__(encode_common_attributes=True)
        self._plain = DefaultFailureConverter()

    def to_failure(self, exception: BaseException, payload_converter: Any, failure: Any) -> None:
        if isinstance(exception, KeyRefused):
            self._plain.to_failure(exception, payload_converter, failure)
        else:
            super().to_failure(exception, payload_converter, failure)


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM under ``keys[0]``; decrypts under any of ``keys`` (the payload's key id picks one).

    A payload written without a key is refused (``KeyRefused``), unless ``plaintext``: then it is read as it is.
    """

    def __init__(self, keys: Sequence[bytes], *, plaintext: bool = False) -> None:
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError:
            needs = f"{KEY_VARIABLE} needs the cryptography package: pip install 'tether[temporal]'"
            raise ConfigurationError(needs) from None
        if not keys:
            raise ConfigurationError(f"{KEY_VARIABLE}: no key")
        self._ciphers: dict[str, AESGCM] = {key_id(key): AESGCM(key) for key in keys}
        self.key_id = key_id(keys[0])
        self.plaintext = plaintext

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        cipher = self._ciphers[self.key_id]
        encoded = []
        for payload in payloads:
            nonce = os.urandom(NONCE_BYTES)
            data = nonce + cipher.encrypt(nonce, payload.SerializeToString(), None)
            encoded.append(Payload(metadata={"encoding": ENCODING, KEY_ID: self.key_id.encode()}, data=data))
        return encoded

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        from cryptography.exceptions import InvalidTag

        decoded = []
        for payload in payloads:
            if payload.metadata.get("encoding") != ENCODING:
                if not self.plaintext:
                    raise KeyRefused(
                        f"a Temporal payload is not encrypted ({_encoding(payload)}) and this process has a"
                        f" {KEY_VARIABLE}, so it reads only what the key encrypted: the payload was written by a client"
                        f" or worker without the key (or by someone without it), or before the key was set; {HINT},"
                        f" and to read runs started before the key was set, add `{PLAINTEXT}` to it (KEY,{PLAINTEXT})"
                    )
                decoded.append(payload)  # written without a key, read as the variable asks
                continue
            wanted = payload.metadata.get(KEY_ID, b"").decode("ascii", "replace")
            cipher = self._ciphers.get(wanted)
            if cipher is None:
                held = ", ".join(self._ciphers)
                raise KeyRefused(
                    f"a Temporal payload is encrypted under key {wanted}, which this process's {KEY_VARIABLE} does"
                    f" not hold (it holds {held}): the keys differ; {HINT}"
                )
            try:
                plain = cipher.decrypt(payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:], None)
            except InvalidTag:
                raise KeyRefused(
                    f"a Temporal payload encrypted under key {wanted} fails its authentication: it was altered"
                    " after it was encrypted"
                ) from None
            decoded.append(Payload.FromString(plain))
        return decoded


def _encoding(payload: Payload) -> str:
    """A payload's encoding, for a message: whoever wrote the payload chose it, so only short printable text."""
    found = payload.metadata.get("encoding")
    if found is None:
        return "no encoding"
    text = found.decode("ascii", "replace")
    return f"encoding {text}" if len(text) <= 40 and text.isprintable() else "an unreadable encoding"


class KeylessCodec(PayloadCodec):
    """The codec of a process without ``TETHER_TEMPORAL_KEY``: payloads pass as they are, and an encrypted one is
    refused, saying so, instead of reaching the converter as an unknown encoding."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        for payload in payloads:
            if payload.metadata.get("encoding") == ENCODING:
                wanted = payload.metadata.get(KEY_ID, b"").decode("ascii", "replace")
                raise KeyRefused(
                    f"a Temporal payload is encrypted under key {wanted} and this process has no {KEY_VARIABLE}: {HINT}"
                )
        return list(payloads)


def payload_codec(environ: Mapping[str, str] = os.environ) -> PayloadCodec:
    """The codec ``TETHER_TEMPORAL_KEY`` in ``environ`` asks for; ``ConfigurationError`` for a malformed one."""
    text = environ.get(KEY_VARIABLE)
    if text is None:
        return KeylessCodec()
    keys, plaintext = parse_keys(text)
    return EncryptionCodec(keys, plaintext=plaintext)


def data_converter(environ: Mapping[str, str] = os.environ) -> DataConverter:
    """The SDK's default data converter with the codec of ``environ`` (``payload_codec``): what ``connect``'s
    clients, and the workers made from them, use. A program building its own ``Client`` passes it."""
    codec = payload_codec(environ)
    if isinstance(codec, KeylessCodec):
        return dataclasses.replace(DataConverter.default, payload_codec=codec)
    return dataclasses.replace(DataConverter.default, payload_codec=codec, failure_converter_class=EncryptedFailures)
