"""The built-in authenticators, over real HTTP: a small FastAPI app served by uvicorn asks one for the caller.

The app answers ``GET /whoami`` with the principal the authenticator gives,
and turns its refusals (and anything unexpected) into problem documents, as
the served app does. API keys come from a real run store; JWTs are made
here, with keys generated here (``cryptography``), and forged the ways an
attacker would: another secret, ``alg: none``, HS256 keyed with the public
key, a key id the server does not know.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jwt
import pytest
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from fastapi import FastAPI, Request
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from tether.core.errors import ConfigurationError
from tether.serve.auth import ApiKeyAuth, JWTAuth, NoAuth, authenticator_from, check_no_auth_bind
from tether.serve.identity import APPROVER_ROLE, Authenticator
from tether.serve.problems import install
from tether.store import SQLiteStore, SQLStore

SECRET = "a JWT secret for the tests, 48 bytes long at the very least"


# --- the app, served --------------------------------------------------------------------------------


def whoami_app() -> FastAPI:
    app = FastAPI()
    install(app, max_body_bytes=1024)

    @app.get("/whoami")
    async def whoami(request: Request) -> dict[str, Any]:
        auth: Authenticator = request.app.state.auth
        principal = await auth.authenticate(request)
        return {"id": principal.id, "roles": sorted(principal.roles), "scopes": sorted(principal.scopes)}

    return app


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FastAPI, str]]:
    """The app on 127.0.0.1 in a thread of its own; set ``app.state.auth`` before calling it."""
    app = whoami_app()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield app, f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(10)
    sock.close()


@contextmanager
def authenticating(served: tuple[FastAPI, str], auth: Authenticator) -> Iterator[str]:
    app, origin = served
    app.state.auth = auth
    try:
        yield origin
    finally:
        del app.state.auth


def call(origin: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any], dict[str, str]]:
    """``GET /whoami``: the status, the JSON body and the headers (lower-cased names)."""
    request = urllib.request.Request(origin + "/whoami", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read()), {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), {k.lower(): v for k, v in error.headers.items()}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def refused(response: tuple[int, dict[str, Any], dict[str, str]], detail: str = "") -> None:
    status, body, headers = response
    assert status == 401, body
    assert body["type"] == "about:blank" and detail in body["detail"], body
    assert headers["www-authenticate"].startswith("Bearer"), headers


# --- API keys -----------------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLStore]:
    opened = SQLiteStore(tmp_path / "runs.db")
    yield opened
    opened.close()


def test_an_api_key_is_accepted_as_a_bearer_token_or_in_x_api_key(served: tuple[FastAPI, str], store: SQLStore) -> None:
    _, key = store.create_api_key("alice", ["approver"], ["tickets:read"])
    with authenticating(served, ApiKeyAuth(store)) as origin:
        for headers in (bearer(key), {"X-API-Key": key}, {"authorization": f"bearer   {key}  "}):
            status, body, _ = call(origin, headers)
            assert (status, body) == (200, {"id": "alice", "roles": ["approver"], "scopes": ["tickets:read"]})


def test_a_missing_unknown_or_malformed_api_key_is_refused(served: tuple[FastAPI, str], store: SQLStore) -> None:
    _, key = store.create_api_key("alice")
    with authenticating(served, ApiKeyAuth(store)) as origin:
        refused(call(origin), "needs an API key")
        for headers in (
            bearer(key[:-1]),
            bearer("tk_" + "A" * 43),
            {"X-API-Key": key + "x"},
            {"X-API-Key": ""},
            # The Authorization header decides when both are sent: a bad one is not rescued by a good X-API-Key.
            {"Authorization": "Bearer nope", "X-API-Key": key},
        ):
            refused(call(origin, headers), "not valid")
        for malformed in (f"Basic {key}", "Bearer", f"Bearer {key} {key}", key):
            refused(call(origin, {"Authorization": malformed}), "Authorization header must be")


def test_a_revoked_api_key_stops_at_once_without_a_restart(
    served: tuple[FastAPI, str], store: SQLStore, tmp_path: Path
) -> None:
    key_id, key = store.create_api_key("alice", ["approver"])
    with authenticating(served, ApiKeyAuth(store)) as origin:
        assert call(origin, bearer(key))[0] == 200
        other = SQLiteStore(tmp_path / "runs.db")  # as `tether keys revoke` would, in its own process
        assert other.revoke_api_key(key_id)
        other.close()
        refused(call(origin, bearer(key)), "unknown or revoked")


def tether_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    done = subprocess.run([sys.executable, "-m", "tether", *argv], capture_output=True, text=True, env=env, timeout=90)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done
    return done


def test_a_key_from_tether_keys_create_works_until_tether_keys_revoke_in_another_process(
    served: tuple[FastAPI, str], store: SQLStore
) -> None:
    made = json.loads(
        tether_cli(
            "keys", "create", "--principal", "alice", "--roles", "approver", "--db", str(store.path), "--json"
        ).stdout
    )
    with authenticating(served, ApiKeyAuth(store)) as origin:
        assert call(origin, bearer(made["key"]))[1] == {"id": "alice", "roles": ["approver"], "scopes": []}
        tether_cli("keys", "revoke", made["key_id"], "--db", str(store.path))
        refused(call(origin, bearer(made["key"])), "unknown or revoked")


def test_the_api_key_is_never_logged_nor_echoed(
    served: tuple[FastAPI, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    keyed = SQLiteStore(tmp_path / "keyed.db", audit_key="an audit key of 32 characters or more")
    key_id, key = keyed.create_api_key("alice", ["viewer"])
    with keyed.dialect.write() as tx:  # roles widened in the database
        tx.execute("UPDATE api_keys SET roles = ? WHERE id = ?", ('["approver"]', key_id))
    caplog.set_level(logging.DEBUG)
    with authenticating(served, ApiKeyAuth(keyed)) as origin:
        for headers in (bearer(key), bearer(key + "x")):
            response = call(origin, headers)
            refused(response)
            assert key not in json.dumps(response[1]) and key not in json.dumps(response[2])
    assert key_id in caplog.text  # the refused row is named for the operator
    assert key not in caplog.text and key[3:20] not in caplog.text
    keyed.close()


# --- JWT: a shared secret -------------------------------------------------------------------------------


def claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    found: dict[str, Any] = {"sub": "alice", "iat": now, "exp": now + 600, **changes}
    return {k: v for k, v in found.items() if v is not None}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hs_forged(header: dict[str, Any], payload: dict[str, Any], key: bytes) -> str:
    """A token made by hand, as an attacker would (pyjwt refuses to key HS256 with a public key)."""
    signing = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    return f"{signing}.{b64(hmac.new(key, signing.encode(), hashlib.sha256).digest())}"


def test_a_good_hs256_token_gives_its_sub_roles_and_scopes(served: tuple[FastAPI, str]) -> None:
    with authenticating(served, JWTAuth(secret=SECRET)) as origin:
        token = jwt.encode(claims(roles=["approver", "auditor"], scope="tickets:read tickets:write"), SECRET)
        status, body, _ = call(origin, bearer(token))
        assert (status, body) == (
            200,
            {"id": "alice", "roles": ["approver", "auditor"], "scopes": ["tickets:read", "tickets:write"]},
        )
        token = jwt.encode(claims(role="approver"), SECRET, algorithm="HS384")
        assert call(origin, bearer(token))[1] == {"id": "alice", "roles": ["approver"], "scopes": []}


def test_hs384_and_hs512_need_a_secret_as_long_as_their_hash(served: tuple[FastAPI, str]) -> None:
    long_secret = SECRET + "-" * (64 - len(SECRET))
    with authenticating(served, JWTAuth(secret="s" * 40)) as origin:
        assert call(origin, bearer(jwt.encode(claims(), "s" * 40)))[0] == 200
        with pytest.warns(jwt.warnings.InsecureKeyLengthWarning):
            refused(call(origin, bearer(jwt.encode(claims(), "s" * 40, algorithm="HS384"))))
    with authenticating(served, JWTAuth(secret=long_secret)) as origin:
        assert call(origin, bearer(jwt.encode(claims(), long_secret, algorithm="HS512")))[0] == 200


@pytest.mark.parametrize(
    ("token", "detail"),  # made when the test runs: a token made at collection may expire first
    [
        (lambda: jwt.encode(claims(roles=["approver"]), "another secret, also longer than 32 bytes"), "not valid"),
        (lambda: jwt.encode(claims(roles=["approver"]), None, algorithm="none"), "not valid"),
        (lambda: hs_forged({"alg": "none", "typ": "JWT"}, claims(), b"")[:-1], "not valid"),
        (lambda: hs_forged({"alg": "HS256"}, claims(), SECRET.encode())[:-2] + "AA", "not valid"),
        (lambda: jwt.encode(claims(exp=int(time.time()) - 60), SECRET), "expired"),
        (lambda: jwt.encode(claims(nbf=int(time.time()) + 600), SECRET), "not valid yet"),
        (lambda: jwt.encode(claims(sub=None), SECRET), "no sub claim"),
        (lambda: jwt.encode(claims(exp=None), SECRET), "no exp claim"),
        (lambda: hs_forged({"alg": "HS256"}, claims(sub=42), SECRET.encode()), "not valid"),
        (lambda: jwt.encode(claims(sub="  "), SECRET), "sub"),
        (lambda: jwt.encode(claims(sub="alice\x00"), SECRET), "sub"),
        (lambda: jwt.encode(claims(sub="a" * 201), SECRET), "sub"),
        (lambda: jwt.encode(claims(sub=" alice"), SECRET), "sub"),  # a principal of its own, shown as alice
        (lambda: jwt.encode(claims(roles=["r" * 201]), SECRET), "roles must be a list"),
        (lambda: jwt.encode(claims(roles="approver"), SECRET), "roles must be a list"),
        (lambda: jwt.encode(claims(roles=["approver", 1]), SECRET), "roles must be a list"),
        (lambda: jwt.encode(claims(roles=["two words"]), SECRET), "roles must be a list"),
        (lambda: jwt.encode(claims(role=["approver"]), SECRET), "role must be a string"),
        (lambda: jwt.encode(claims(scope=["tickets:read"]), SECRET), "scope must be"),
        (lambda: jwt.encode(claims(scope="tickets:read tickets\x00"), SECRET), "scope must be"),
        (lambda: jwt.encode(claims(scope="tickets:read \ud800"), SECRET), "scope must be"),  # no store writes it
        (lambda: jwt.encode(claims(scope="s" * 201), SECRET), "scope must be"),
        (lambda: jwt.encode(claims(exp="tomorrow"), SECRET), "not valid"),
        (lambda: jwt.encode(claims(aud="another-service"), SECRET), "(aud)"),  # none configured: aud refused
        (lambda: hs_forged({"alg": "HS256", "kid": 7, "crit": ["x"]}, claims(), SECRET.encode()), "not valid"),
        (lambda: hs_forged({"alg": ["HS256"]}, claims(), SECRET.encode()), "not valid"),
        (lambda: b64(b"[1, 2]") + "." + b64(b"{}") + ".", "not valid"),
        (lambda: b64(b"\xff\xfe") + "." + b64(b"{}") + "." + b64(b"sig"), "not valid"),
        (lambda: "abc.def.ghi", "not valid"),
        (lambda: "a.b", "not valid"),
        (lambda: "." * 3, "not valid"),
        (lambda: "tk_" + "A" * 43, "not valid"),
    ],
    ids=[
        "wrong-signature",
        "alg-none",
        "alg-none-by-hand",
        "signature-edited",
        "expired",
        "future-nbf",
        "no-sub",
        "no-exp",
        "sub-not-a-string",
        "sub-blank",
        "sub-control-character",
        "sub-too-long",
        "sub-leading-space",
        "role-too-long",
        "roles-a-string",
        "roles-not-strings",
        "role-with-space",
        "role-a-list",
        "scope-a-list",
        "scope-control-character",
        "scope-lone-surrogate",
        "scope-too-long",
        "exp-not-a-number",
        "unexpected-audience",
        "odd-header",
        "alg-a-list",
        "header-a-list",
        "header-not-utf8",
        "garbage",
        "two-parts",
        "empty-parts",
        "an-api-key",
    ],
)
def test_a_bad_jwt_is_a_401_never_a_500(served: tuple[FastAPI, str], token: Callable[[], str], detail: str) -> None:
    with authenticating(served, JWTAuth(secret=SECRET)) as origin:
        refused(call(origin, bearer(token())), detail)


def test_issuer_audience_and_leeway_are_checked_when_configured(served: tuple[FastAPI, str]) -> None:
    auth = JWTAuth(secret=SECRET, issuer="https://id.example", audience="tether", leeway=120)
    with authenticating(served, auth) as origin:
        good = claims(iss="https://id.example", aud="tether")
        assert call(origin, bearer(jwt.encode(good, SECRET)))[0] == 200
        late = {**good, "exp": int(time.time()) - 30}  # within the leeway
        assert call(origin, bearer(jwt.encode(late, SECRET)))[0] == 200
        refused(call(origin, bearer(jwt.encode({**good, "exp": int(time.time()) - 600}, SECRET))), "expired")
        refused(call(origin, bearer(jwt.encode({**good, "iss": "https://evil.example"}, SECRET))), "(iss)")
        refused(call(origin, bearer(jwt.encode({**good, "aud": "other"}, SECRET))), "(aud)")
        refused(call(origin, bearer(jwt.encode(claims(iss="https://id.example"), SECRET))), "no aud claim")
        refused(call(origin, bearer(jwt.encode(claims(aud="tether"), SECRET))), "no iss claim")


def test_a_short_secret_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="at least 32 bytes"):
        JWTAuth(secret="x" * 31)
    with pytest.raises(ConfigurationError):
        JWTAuth()
    with pytest.raises(ConfigurationError):
        JWTAuth(secret=SECRET, jwks_file="keys.json")
    assert ConfigurationError.exit_code == 3


# --- JWT: public keys from a JWKS file ---------------------------------------------------------------


@pytest.fixture(scope="module")
def signing_keys() -> dict[str, Any]:
    return {
        "rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "ec": ec.generate_private_key(ec.SECP256R1()),
        "ed": ed25519.Ed25519PrivateKey.generate(),
    }


@pytest.fixture
def jwks_file(tmp_path: Path, signing_keys: dict[str, Any]) -> Path:
    keys = [
        {**json.loads(RSAAlgorithm.to_jwk(signing_keys["rsa"].public_key())), "kid": "rsa-1", "use": "sig"},
        {**json.loads(RSAAlgorithm.to_jwk(signing_keys["rsa"].public_key())), "kid": "rsa-pinned", "alg": "RS256"},
        {**json.loads(ECAlgorithm.to_jwk(signing_keys["ec"].public_key())), "kid": "ec-1"},
        {**json.loads(OKPAlgorithm.to_jwk(signing_keys["ed"].public_key())), "kid": "ed-1", "alg": "EdDSA"},
    ]
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": keys}))
    return path


def test_tokens_signed_with_a_jwks_key_are_accepted(
    served: tuple[FastAPI, str], jwks_file: Path, signing_keys: dict[str, Any]
) -> None:
    signed = [
        jwt.encode(claims(roles=["approver"]), signing_keys["rsa"], algorithm="RS256", headers={"kid": "rsa-1"}),
        jwt.encode(claims(roles=["approver"]), signing_keys["rsa"], algorithm="PS384", headers={"kid": "rsa-1"}),
        jwt.encode(claims(roles=["approver"]), signing_keys["rsa"], algorithm="RS256", headers={"kid": "rsa-pinned"}),
        jwt.encode(claims(roles=["approver"]), signing_keys["ec"], algorithm="ES256", headers={"kid": "ec-1"}),
        jwt.encode(claims(roles=["approver"]), signing_keys["ed"], algorithm="EdDSA", headers={"kid": "ed-1"}),
    ]
    with authenticating(served, JWTAuth(jwks_file=jwks_file)) as origin:
        for token in signed:
            assert call(origin, bearer(token))[1] == {"id": "alice", "roles": ["approver"], "scopes": []}


def test_jwks_tokens_forged_or_with_the_wrong_key_are_refused(
    served: tuple[FastAPI, str], jwks_file: Path, signing_keys: dict[str, Any]
) -> None:
    public_pem = (
        signing_keys["rsa"]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    public_jwk = RSAAlgorithm.to_jwk(signing_keys["rsa"].public_key()).encode()
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = [
        # Algorithm confusion: HS256 keyed with the public key, which everyone has.
        hs_forged({"alg": "HS256", "kid": "rsa-1"}, claims(roles=["approver"]), public_pem),
        hs_forged({"alg": "HS256", "kid": "rsa-1"}, claims(roles=["approver"]), public_jwk),
        hs_forged({"alg": "HS256"}, claims(roles=["approver"]), public_pem),
        jwt.encode(claims(), None, algorithm="none", headers={"kid": "rsa-1"}),
        # Signed by a key the file does not hold, under a kid it does, or none, or one it does not know.
        jwt.encode(claims(), stranger, algorithm="RS256", headers={"kid": "rsa-1"}),
        jwt.encode(claims(), stranger, algorithm="RS256"),
        jwt.encode(claims(), signing_keys["rsa"], algorithm="RS256", headers={"kid": "rsa-2"}),
        # A good signature under an algorithm its key is not for: the EC key's kid on an RSA signature.
        jwt.encode(claims(), signing_keys["rsa"], algorithm="RS256", headers={"kid": "ec-1"}),
        # A key whose alg says RS256 verifies nothing else, though PS256 uses the same RSA key.
        jwt.encode(claims(), signing_keys["rsa"], algorithm="PS256", headers={"kid": "rsa-pinned"}),
        # The Ed25519 key is pinned to EdDSA by its alg; the EC key by its curve to ES256.
        jwt.encode(claims(), ec.generate_private_key(ec.SECP384R1()), algorithm="ES384", headers={"kid": "ec-1"}),
        jwt.encode(claims(exp=int(time.time()) - 5), signing_keys["ed"], algorithm="EdDSA", headers={"kid": "ed-1"}),
    ]
    with authenticating(served, JWTAuth(jwks_file=jwks_file)) as origin:
        for token in forged:
            refused(call(origin, bearer(token)))


@pytest.mark.parametrize(
    ("keys", "error"),
    [
        ([{"kty": "oct", "k": b64(SECRET.encode())}], "symmetric"),
        ("private-rsa", "private key"),
        ([{"kty": "RSA", "n": "AQAB", "e": "AQAB", "alg": "HS256"}], "does not fit"),
        ([{"kty": "EC", "crv": "P-999", "x": "AA", "y": "AA"}], "unsupported key type"),
        ([{"kty": "RSA", "n": "!!", "e": "AQAB"}], "not a usable key"),
        ([], "non-empty"),
        ([{"kty": "RSA", "use": "enc", "n": "AQAB", "e": "AQAB"}], "no signing key"),
        ("two-without-kid", "each needs a kid"),
    ],
)
def test_a_jwks_file_tether_will_not_use_is_a_configuration_error(
    tmp_path: Path, signing_keys: dict[str, Any], keys: Any, error: str
) -> None:
    public = json.loads(RSAAlgorithm.to_jwk(signing_keys["rsa"].public_key()))
    if keys == "private-rsa":
        keys = [json.loads(RSAAlgorithm.to_jwk(signing_keys["rsa"]))]
    elif keys == "two-without-kid":
        keys = [public, {**public, "kid": "b"}]
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": keys}))
    with pytest.raises(ConfigurationError, match=error):
        JWTAuth(jwks_file=path)


def test_an_unreadable_jwks_file_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read"):
        JWTAuth(jwks_file=tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigurationError, match="cannot read"):
        JWTAuth(jwks_file=tmp_path / "bad.json")


# --- no authentication, and --auth specs ---------------------------------------------------------


def test_no_auth_is_one_local_approver(served: tuple[FastAPI, str]) -> None:
    with authenticating(served, NoAuth()) as origin:
        assert call(origin)[1] == {"id": "local", "roles": [APPROVER_ROLE], "scopes": ["*"]}
    with authenticating(served, NoAuth("me", {"approver", "admin"})) as origin:
        assert call(origin)[1] == {"id": "me", "roles": ["admin", APPROVER_ROLE], "scopes": ["*"]}


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "10.0.0.5", "[2001:db8::1]:80", ""])
def test_no_auth_refuses_a_request_addressed_to_another_name(served: tuple[FastAPI, str], host: str) -> None:
    # A page whose DNS name was rebound to 127.0.0.1 reaches the loopback server with its own name in Host.
    with authenticating(served, NoAuth()) as origin:
        status, body, _ = call(origin, {"Host": host})
        assert status == 421 and "addressed to localhost" in body["detail"]
        for own in ("localhost:8000", "127.0.0.1", "[::1]:8000"):
            assert call(origin, {"Host": own})[0] == 200


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LocalHost", "::ffff:127.0.0.1"]
)
def test_no_auth_binds_loopback(host: str) -> None:
    check_no_auth_bind(host)


@pytest.mark.parametrize(
    "host", ["0.0.0.0", "::", "", "192.168.1.10", "10.0.0.1", "::ffff:10.0.0.1", "example.com", "localhost.evil.com"]
)
def test_no_auth_bound_beyond_loopback_is_refused(host: str, store: SQLStore) -> None:
    with pytest.raises(ConfigurationError, match="loopback"):
        check_no_auth_bind(host)
    with pytest.raises(ConfigurationError, match="loopback"):
        authenticator_from("none", store, host=host)


def test_auth_specs_name_the_authenticator(store: SQLStore, jwks_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_JWT_SECRET", SECRET)
    assert isinstance(authenticator_from("none", store, host="127.0.0.1"), NoAuth)
    assert isinstance(authenticator_from(" keys ", store), ApiKeyAuth)
    made = authenticator_from("jwt:secret-env=TEST_JWT_SECRET,issuer=https://id.example,leeway=5", store)
    assert isinstance(made, JWTAuth) and (made.issuer, made.audience, made.leeway) == ("https://id.example", None, 5)
    made = authenticator_from(f"jwt:jwks={jwks_file},audience=tether", store)
    assert isinstance(made, JWTAuth) and made.audience == "tether"


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "basic",
        "key",
        "none:x",
        "keys:x",
        "jwt",
        "jwt:",
        "jwt:secret-env",
        "jwt:secret-env=",
        "jwt:secret-env=TETHER_TEST_UNSET",
        "jwt:secret-env=TEST_SHORT_SECRET",
        "jwt:secret-env=TEST_JWT_SECRET,jwks=keys.json",
        "jwt:secret-env=TEST_JWT_SECRET,colour=blue",
        "jwt:secret-env=TEST_JWT_SECRET,secret-env=TEST_JWT_SECRET",
        "jwt:secret-env=TEST_JWT_SECRET,leeway=soon",
        "jwt:secret-env=TEST_JWT_SECRET,leeway=-1",
        "jwt:secret-env=TEST_JWT_SECRET,leeway=nan",
        "jwt:issuer=x",
        "jwt:jwks=/no/such/file.json",
    ],
)
def test_a_bad_auth_spec_is_a_configuration_error(spec: str, store: SQLStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_JWT_SECRET", SECRET)
    monkeypatch.setenv("TEST_SHORT_SECRET", "short")
    monkeypatch.delenv("TETHER_TEST_UNSET", raising=False)
    with pytest.raises(ConfigurationError):
        authenticator_from(spec, store)
