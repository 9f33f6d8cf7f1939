"""A client generated from each origin's OpenAPI document with openapi-python-client, as a user would make one: the
operations that declare their answer and errors (core/contract.py) come back as the generated models, a refusal as
the origin's error model, and the bytes on the wire are msgspec's encoding of the answer's type (as before the
handlers returned structs).

Converted so far (issue 44, steps 3.2 and 3.3): the operator's clock move, every identity-provider operation (its
flow: register, token, claim, discovery), every site operation outside /_emulator (the trial and its claim page,
/ask, /mcp, discovery, pages, /health) and the control plane's `POST /`; the rest follow in 3.3, and this test with
them.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import io
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import msgspec
import pytest

from emulator.admin.wire import ClaimDecided, ClockView, StatusView
from emulator.cloud import answers
from emulator.hosted.declared import Applied
from emulator.identity.discovery import AuthorizationServer
from emulator.identity.wire import AccessToken, ClaimStarted, Registered
from emulator.site.ask import AskSuccess
from emulator.site.mcp import DocsSearched
from emulator.site.trials import TrialOrg
from tests.conftest import Emulator, next_ip

DOCUMENT = "/schema/openapi.json"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


def _import(package: str, *names: str) -> list[ModuleType]:
    return [importlib.import_module(f"{package}.{name}") for name in names]


@pytest.fixture(scope="module")
def generated(emu: Emulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The three clients, generated into one folder (put on sys.path) as packages gen_site, gen_auth, gen_api."""
    root = tmp_path_factory.mktemp("generated")
    config = root / "config.yaml"
    # No ruff run over the output (nothing on PATH is needed). The operator's files are described as sent (a PEM,
    # a gzip archive, a TOML body); the generator reads those as text and bytes once told which is which.
    config.write_text(
        "post_hooks: []\n"
        "content_type_overrides:\n"
        "  application/x-pem-file: text/plain\n"
        "  application/gzip: application/octet-stream\n"
        "  application/toml: text/plain\n"
    )
    for origin, base in (("site", emu.url), ("auth", emu.auth), ("api", emu.api)):
        document = root / f"{origin}.json"
        document.write_bytes(httpx.get(base + DOCUMENT, timeout=20).raise_for_status().content)
        command = [sys.executable, "-m", "openapi_python_client", "generate", "--path", str(document)]
        command += ["--output-path", str(root / f"gen_{origin}"), "--meta", "none", "--config", str(config)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(root))
    try:
        yield str(root)
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n.split(".")[0] in ("gen_site", "gen_auth", "gen_api")]:
            del sys.modules[name]


def _client(package: str, base: str, token: str | None = None, **headers: str) -> Any:
    (client,) = _import(package, "client")
    transport = httpx.HTTPTransport(local_address=next_ip())  # an address of its own: its own rate-limit window
    args: dict[str, Any] = {"base_url": base, "timeout": httpx.Timeout(20), "httpx_args": {"transport": transport}}
    if headers:
        args["headers"] = headers
    if token is not None:
        return client.AuthenticatedClient(token=token, **args)
    return client.Client(**args)


def _same_bytes(raw: bytes, kind: Any) -> None:
    """The answer is what `msgspec.json.encode` writes for its type, as the handlers sent before they returned one."""
    assert raw == msgspec.json.encode(msgspec.json.decode(raw, type=kind))


def test_the_operators_clock_move_answers_a_clock_view_and_refuses_in_the_envelope(
    generated: str, emu: Emulator
) -> None:
    (move,) = _import("gen_site.api.default", "operator_clock_move")
    clock_move, clock_view, error_body = _import("gen_site.models", "clock_move", "clock_view", "error_body")
    with _client("gen_site", emu.url) as c:
        done = move.sync_detailed(client=c, body=clock_move.ClockMove(freeze=True))  # frozen already: no change
        assert done.status_code == 200 and isinstance(done.parsed, clock_view.ClockView)
        assert done.parsed.frozen is True and done.parsed.iso.startswith("2026-")
        _same_bytes(done.content, ClockView)
        refused = move.sync_detailed(client=c, body=clock_move.ClockMove(advance="-5s"))
    assert refused.status_code == 400 and isinstance(refused.parsed, error_body.ErrorBody)
    assert refused.parsed.error.code == "bad_request"
    assert refused.parsed.error.message == "clock: advance must not be negative; use set to go back"


def test_the_identity_providers_registration_answers_registered_and_refuses_in_its_format(
    generated: str, emu: Emulator
) -> None:
    (register,) = _import("gen_auth.api.default", "register")
    registration, registered, registration_error, registration_type = _import(
        "gen_auth.models", "registration", "registered", "registration_error", "registration_type"
    )
    with _client("gen_auth", emu.auth) as c:
        done = register.sync_detailed(
            client=c, body=registration.Registration(type_=registration_type.RegistrationType("anonymous"))
        )
        assert done.status_code == 200 and isinstance(done.parsed, registered.Registered)
        assert done.parsed.type_ == "anonymous" and done.parsed.identity.assertion  # its nested Grant, a model too
        _same_bytes(done.content, Registered)
        refused = register.sync_detailed(
            client=c, body=registration.Registration(type_=registration_type.RegistrationType("refresh"))
        )
    assert refused.status_code == 400 and isinstance(refused.parsed, registration_error.RegistrationError)
    assert (refused.parsed.code, refused.parsed.error) == ("invalid_request", "invalid_request")
    assert refused.parsed.message == "type refresh needs refresh_token"


def test_the_identity_providers_flow_through_its_generated_client(generated: str, emu: Emulator) -> None:
    """Register, exchange the assertion for an access token (a form), start the claim, and read the discovery
    document: each answer the generated model, its bytes msgspec's; a refusal the route's own error model."""
    register, token, start_claim, metadata = _import(
        "gen_auth.api.default", "register", "token", "start_claim", "authorization_server_metadata"
    )
    registration, registration_type, token_form, grant_type, access_token, o_auth_error = _import(
        "gen_auth.models",
        "registration",
        "registration_type",
        "token_form",
        "token_form_grant_type",
        "access_token",
        "o_auth_error",
    )
    claim_start, claim_start_type, claim_started, registration_error, authorization_server = _import(
        "gen_auth.models",
        "claim_start",
        "claim_start_type",
        "claim_started",
        "registration_error",
        "authorization_server",
    )
    bearer = grant_type.TokenFormGrantType(JWT_BEARER)
    with _client("gen_auth", emu.auth) as c:
        reg = register.sync(client=c, body=registration.Registration(registration_type.RegistrationType("anonymous")))
        assert reg is not None and not isinstance(reg, registration_error.RegistrationError)
        assertion = reg.identity.assertion

        exchanged = token.sync_detailed(client=c, body=token_form.TokenForm(grant_type=bearer, assertion=assertion))
        assert exchanged.status_code == 200 and isinstance(exchanged.parsed, access_token.AccessToken)
        assert exchanged.parsed.token_type == "Bearer" and exchanged.parsed.expires_in > 0
        assert exchanged.headers["cache-control"] == "no-store"
        _same_bytes(exchanged.content, AccessToken)

        refused = token.sync_detailed(client=c, body=token_form.TokenForm(grant_type=bearer, assertion=""))
        assert refused.status_code == 400 and isinstance(refused.parsed, o_auth_error.OAuthError)
        assert refused.parsed.error == "invalid_request"
        assert refused.parsed.error_description == "assertion is required (the registration's identity.assertion)"

        started = start_claim.sync_detailed(
            client=c,
            body=claim_start.ClaimStart(
                type_=claim_start_type.ClaimStartType("service_auth"), claim_token=reg.claim.token
            ),
        )
        assert started.status_code == 200 and isinstance(started.parsed, claim_started.ClaimStarted)
        assert started.parsed.id == reg.id and started.parsed.attempt.verification_uri.startswith(emu.auth + "/claim")
        _same_bytes(started.content, ClaimStarted)
        unknown = start_claim.sync_detailed(
            client=c, body=claim_start.ClaimStart(type_=claim_start_type.ClaimStartType("service_auth"), claim_token="")
        )
        assert unknown.status_code == 400 and isinstance(unknown.parsed, registration_error.RegistrationError)
        assert (unknown.parsed.code, unknown.parsed.message) == ("invalid_request", "claim_token is required")

        document = metadata.sync_detailed(client=c)
        assert isinstance(document.parsed, authorization_server.AuthorizationServer)
        assert document.parsed.issuer == emu.auth and document.parsed.token_endpoint == emu.auth + "/oauth2/token"
        _same_bytes(document.content, AuthorizationServer)


def _access_token(emu: Emulator) -> str:
    with httpx.Client(timeout=20, transport=httpx.HTTPTransport(local_address=next_ip())) as c:
        reg = c.post(emu.auth + "/agent/identity", json={"type": "anonymous"}).raise_for_status().json()
        form = {"grant_type": JWT_BEARER, "assertion": reg["identity"]["assertion"]}
        return c.post(emu.auth + "/oauth2/token", data=form).raise_for_status().json()["access_token"]


def test_a_trial_and_the_control_plane_answer_their_models(generated: str, emu: Emulator) -> None:
    (create,) = _import("gen_site.api.default", "api_v1_trial_orgs_create_trial")
    trial_org, message = _import("gen_site.models", "trial_org", "message")
    with _client("gen_site", emu.url, token="not-a-token") as c:
        refused = create.sync_detailed(client=c)
    assert refused.status_code == 401 and isinstance(refused.parsed, message.Message)
    assert "WWW-Authenticate" in refused.headers
    with _client("gen_site", emu.url, token=_access_token(emu)) as c:
        made = create.sync_detailed(client=c)
    assert made.status_code == 201 and isinstance(made.parsed, trial_org.TrialOrg)
    assert made.parsed.api_url == emu.api and made.headers["cache-control"] == "no-store"
    _same_bytes(made.content, TrialOrg)

    (management,) = _import("gen_api.api.default", "management")
    get_usage, list_dbs, usage, reports = _import("gen_api.models", "get_usage", "list_dbs", "usage", "reports")
    get_usage_type, list_dbs_type, get_db, get_db_type = _import(
        "gen_api.models", "get_usage_operation_type", "list_dbs_operation_type", "get_db", "get_db_operation_type"
    )
    with _client("gen_api", emu.api, token=made.parsed.api_key) as c:
        c.auth_header_name, c.prefix = "X-api-key", ""
        used = management.sync_detailed(
            client=c, body=get_usage.GetUsage(get_usage_type.GetUsageOperationType("get_usage"))
        )
        assert used.status_code == 200 and isinstance(used.parsed, usage.Usage), used.content
        assert used.parsed.plan and used.parsed.meters == []
        _same_bytes(used.content, answers.Usage)
        listed = management.sync_detailed(
            client=c, body=list_dbs.ListDbs(list_dbs_type.ListDbsOperationType("list_dbs"))
        )
        assert listed.status_code == 200 and isinstance(listed.parsed, reports.Reports), listed.content
        assert len(listed.parsed.reports) == 1  # the trial's database
        _same_bytes(listed.content, answers.Reports)
        refused = management.sync_detailed(
            client=c, body=get_db.GetDb(get_db_type.GetDbOperationType("get_db"), db="no such db!")
        )
    assert refused.status_code in (400, 404) and isinstance(refused.parsed, str)
    assert refused.parsed.startswith(("Bad Request : ", "Not Found : "))


def test_the_sites_trial_claim_ask_and_mcp_answer_their_models_and_refuse_in_its_formats(
    generated: str, emu: Emulator
) -> None:
    (create, claim_page, claim_submit, ask_get, ask_post, mcp_post) = _import(
        "gen_site.api.default",
        "api_v1_trial_orgs_create_trial",
        "claim_token_claim_page",
        "claim_token_claim_submit",
        "ask_ask_get",
        "ask_ask_post",
        "mcp_mcp_post",
    )
    trial_org, claim_form, ask_success, ask_request, error_body, json_rpc_request, docs_searched = _import(
        "gen_site.models",
        "trial_org",
        "claim_form",
        "ask_success",
        "ask_request",
        "error_body",
        "json_rpc_request",
        "docs_searched",
    )
    # The trial, then its claim page (HTML for a person) and the claim, through the same client.
    with _client("gen_site", emu.url, token=_access_token(emu)) as c:
        made = create.sync_detailed(client=c)
        assert made.status_code == 201 and isinstance(made.parsed, trial_org.TrialOrg)
        token = made.parsed.claim_url.rsplit("/", 1)[1]
        page = claim_page.sync_detailed(token, client=c)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert made.parsed.org in page.content.decode()
        claimed = claim_submit.sync_detailed(token, client=c, body=claim_form.ClaimForm(email="owner@example.com"))
        assert claimed.status_code == 200 and f"You own {made.parsed.org}" in claimed.content.decode()
        gone = claim_page.sync_detailed(token, client=c)  # claimed: the link is spent, said on a page
        assert gone.status_code == 404 and "this claim link is not valid" in gone.content.decode()

    with _client("gen_site", emu.url) as c:  # an address of its own: a fresh /ask rate window
        asked = ask_get.sync_detailed(client=c, query="create a table")
        assert asked.status_code == 200 and isinstance(asked.parsed, ask_success.AskSuccess)
        assert asked.parsed.query == "create a table" and asked.parsed.results and asked.parsed.field_meta.site
        assert asked.parsed.results[0].url.startswith(emu.url)
        _same_bytes(asked.content, AskSuccess)
        posted = ask_post.sync_detailed(client=c, body=ask_request.AskRequest(query="trial"))
        assert posted.status_code == 200 and isinstance(posted.parsed, ask_success.AskSuccess)
        too_long = ask_get.sync_detailed(client=c, query="x" * 2001)
        assert too_long.status_code == 400 and isinstance(too_long.parsed, error_body.ErrorBody)
        assert too_long.parsed.error.code == "bad_request"
        assert too_long.parsed.error.message == "`query` is 2001 characters long; the limit is 2000"
        limited = None
        for _ in range(12):  # 10 a minute per address; the clock is frozen, so the window does not roll over
            limited = ask_get.sync_detailed(client=c, query="trial")
            if limited.status_code != 200:
                break
        assert limited is not None and limited.status_code == 429 and isinstance(limited.parsed, error_body.ErrorBody)
        assert limited.parsed.error.code == "rate_limited" and limited.parsed.error.retryable is True
        assert limited.parsed.retry_after == int(limited.headers["retry-after"])

        call = json_rpc_request.JsonRpcRequest.from_dict(
            {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": "search_docs", "arguments": {"query": "trial"}},
            }
        )
        found = mcp_post.sync_detailed(client=c, body=call)
        assert found.status_code == 200 and isinstance(found.parsed, docs_searched.DocsSearched), found.content
        assert found.parsed.id == 7 and found.parsed.result.structured_content.results
        _same_bytes(found.content, DocsSearched)


def test_every_site_operation_declares_its_answer_and_its_errors_bodies(generated: str) -> None:
    """Outside /_emulator (the operator API's lane): each 2xx is a JSON object, an event stream of a described event,
    or a page; no operation shows Litestar's default error; every one has a `default` refusal."""
    document = msgspec.json.decode((Path(generated) / "site.json").read_bytes())
    schemas = document["components"]["schemas"]
    operations = [
        (path, method, operation)
        for path, item in document["paths"].items()
        if not path.startswith("/_emulator")
        for method, operation in item.items()
    ]
    assert len(operations) >= 25
    for path, method, operation in operations:
        responses = operation["responses"]
        assert "default" in responses and "status_code" not in str(responses), (method, path)
        ok = next(response for status, response in responses.items() if status.startswith("2"))
        for media, content in ok.get("content", {}).items():
            schema = content["schema"]
            if media.startswith("text/event-stream"):  # each event's data: JSON of an AskEvent
                assert schema["properties"]["data"]["contentSchema"] == {"$ref": "#/components/schemas/AskEvent"}
                assert {"$ref": "#/components/schemas/AskBegin"} in schemas["AskEvent"]["anyOf"]
            elif media.startswith(("text/html", "text/markdown", "text/plain")):
                assert schema == {"type": "string"}, (method, path)
            else:
                named = schema["$ref"].rsplit("/", 1)[1] if "$ref" in schema else None
                assert (named and schemas[named]["type"] == "object") or "oneOf" in schema, (method, path, media)
        assert ok.get("content") or method == "head" or "202" in responses, (method, path)


def test_the_documents_declare_no_default_litestar_error_on_the_converted_operations(
    generated: str, emu: Emulator
) -> None:
    root = Path(generated)
    converted = {
        "site": [("/_emulator/clock", "post"), ("/api/v1/trial-orgs", "post")],
        "auth": [("/agent/identity", "post")],
        "api": [("/", "post")],
    }
    for origin, operations in converted.items():
        document = msgspec.json.decode((root / f"{origin}.json").read_bytes())
        for path, method in operations:
            responses = document["paths"][path][method]["responses"]
            assert "default" in responses
            for status, response in responses.items():
                (media,) = response["content"].values()
                assert "status_code" not in str(media["schema"]), (origin, path, status)
                assert media["schema"] != {"type": "string"} or not status.startswith("2"), (origin, path, status)


def _trial(emu: Emulator) -> dict[str, Any]:
    with httpx.Client(timeout=20, transport=httpx.HTTPTransport(local_address=next_ip())) as c:
        made = c.post(emu.url + "/api/v1/trial-orgs", headers={"Authorization": f"Bearer {_access_token(emu)}"})
        return made.raise_for_status().json()


def test_the_control_plane_through_its_generated_client(generated: str, emu: Emulator) -> None:
    """Every control-plane operation typed (issue 44 step 3.3 D): the management API's answers as their models, a
    plan's refusal as the text error with its X-Pixeltable-Error-Code read, the archive's upload and download as
    octet-stream, and `/.well-known/pixeltable-auth` as its model."""
    management, upload_blob, download_blob, pixeltable_auth = _import(
        "gen_api.api.default", "management", "upload_blob", "download_blob", "pixeltable_auth"
    )
    models = importlib.import_module("gen_api.models")
    types = importlib.import_module("gen_api.types")
    trial = _trial(emu)
    archive = b"a project archive"
    sha = hashlib.sha256(archive).hexdigest()

    def prepare(db: str, **fields: Any) -> Any:
        body = models.PrepareUpdate(models.PrepareUpdateOperationType("prepare_update"), db=db, **fields)
        return management.sync_detailed(client=c, body=body)

    with _client("gen_api", emu.api, token=trial["api_key"]) as c:
        c.auth_header_name, c.prefix = "X-api-key", ""
        # The trial's database, planned with an archive to upload: its report, its generation, where to upload.
        plan = prepare("main", blob=models.Blob(sha256=sha, size=len(archive)))
        assert plan.status_code == 200 and isinstance(plan.parsed, models.PlanAnswer), plan.content
        assert plan.parsed.report.db == "main" and plan.parsed.generations.database >= 0
        assert (
            isinstance(plan.parsed.upload, models.Upload)
            and f"/blobs/{trial['org_id']}/{sha}?" in plan.parsed.upload.url
        )
        _same_bytes(plan.content, answers.PlanAnswer)
        # A second database is past the trial's plan: the text error, its code in the header.
        refused = prepare("second", database_target=models.DatabaseTarget(cpu=1))
        assert refused.status_code == 402 and isinstance(refused.parsed, str)
        assert refused.parsed.startswith("Payment Required : ") and "one database" in refused.parsed
        assert refused.headers["X-Pixeltable-Error-Code"] == "PLAN_LIMIT"
        # A key made and listed.
        made = management.sync_detailed(
            client=c, body=models.CreateKey(models.CreateKeyOperationType("create_key"), name="ci")
        )
        assert made.status_code == 200 and isinstance(made.parsed, models.KeyAnswer), made.content
        assert made.parsed.key.name == "ci" and str(made.parsed.key.api_key).startswith("pxtk_")
        listed_keys = management.sync_detailed(
            client=c, body=models.ListKeys(models.ListKeysOperationType("list_keys"))
        )
        assert isinstance(listed_keys.parsed, models.Keys)
        assert "ci" in [k.name for k in listed_keys.parsed.keys] and listed_keys.parsed.keys[0].api_key is None
        # The database listed, and the organization's usage.
        listed = management.sync_detailed(client=c, body=models.ListDbs(models.ListDbsOperationType("list_dbs")))
        assert isinstance(listed.parsed, models.Reports) and [r.db for r in listed.parsed.reports] == ["main"]
        used = management.sync_detailed(client=c, body=models.GetUsage(models.GetUsageOperationType("get_usage")))
        assert isinstance(used.parsed, models.Usage) and "Databases" in [r.label for r in used.parsed.resources]

    # The archive, uploaded as octet-stream to the signed URL the plan gave: stored (201, no body), then already
    # stored (412, which the client counts as success); a body that is not the named blob is refused in text.
    url = httpx.URL(plan.parsed.upload.url)
    sig = url.params["sig"]
    with _client("gen_api", emu.api) as c:

        def put(data: bytes, **headers: str) -> Any:
            return upload_blob.sync_detailed(
                trial["org_id"], sha, client=c, body=types.File(payload=io.BytesIO(data)), sig=sig, **headers
            )

        mismatched = put(archive, x_amz_checksum_sha256="AAAA")
        assert mismatched.status_code == 400 and isinstance(mismatched.parsed, str)
        assert mismatched.parsed == "Bad Request : x-amz-checksum-sha256 does not match the body"
        checksum = base64.b64encode(hashlib.sha256(archive).digest()).decode()
        stored = put(archive, x_amz_checksum_sha256=checksum)
        assert stored.status_code == 201 and stored.content == b"" and stored.parsed is None
        assert put(archive).status_code == 412
        forged = download_blob.sync_detailed(sha, client=c, exp=2**40, sig="forged")
        assert forged.status_code == 403 and forged.parsed == "Forbidden : the signature of this URL is not valid"
        auth = pixeltable_auth.sync_detailed(client=c)
    assert auth.status_code == 200 and isinstance(auth.parsed, models.PixeltableAuth)
    assert auth.parsed.client_id == "client_pxt_emulator" and auth.parsed.workos_api == emu.auth
    assert auth.content == msgspec.json.encode({"client_id": "client_pxt_emulator", "workos_api": emu.auth})


def test_every_control_plane_operation_declares_its_answer_and_its_text_errors(generated: str) -> None:
    document = msgspec.json.decode((Path(generated) / "api.json").read_bytes())
    for path, item in document["paths"].items():
        for method, operation in item.items():
            where = (method, path)
            for status, response in operation["responses"].items():
                content = response.get("content", {})
                if status.startswith("2"):
                    schemas = {media: declared["schema"] for media, declared in content.items()}
                    if "application/json" in schemas:  # an object (or any of several)
                        assert "$ref" in schemas["application/json"] or "anyOf" in schemas["application/json"], where
                    elif schemas:  # the archive, as a stream
                        assert schemas == {"application/octet-stream": {"type": "string", "format": "binary"}}, where
                    else:  # an upload's 201 sends nothing
                        assert where == ("put", "/blobs/{org_id}/{sha256}"), where
                elif content:  # every refusal (and the default answer): the text, with the plan's code header
                    assert list(content) == ["text/plain"] and "X-Pixeltable-Error-Code" in response["headers"], where
                else:
                    assert (where, status) == (("put", "/blobs/{org_id}/{sha256}"), "412")
            assert "default" in operation["responses"], where


def test_every_identity_provider_operation_declares_its_answer_and_its_errors(generated: str) -> None:
    """Each 2xx of the auth document is a JSON object (a struct's schema), a page (text/html) or, for revocation, an
    empty 200; the sign-in page's decision is a 303 to the client; the signposts (paths that only refuse) declare
    that refusal and no 2xx; every error is the body the route's handler writes, never Litestar's default."""
    document = msgspec.json.decode((Path(generated) / "auth.json").read_bytes())
    schemas = document["components"]["schemas"]
    kinds: dict[str, list[str]] = {}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            assert "default" in responses, (method, path)
            for status, response in responses.items():
                assert "status_code" not in str(response), (method, path, status)
            ok = [response for status, response in responses.items() if status.startswith("2")]
            if not ok and any(status.startswith("3") for status in responses):
                kind = "redirect"  # the person's decision on the sign-in page: back to the client (303)
            elif not ok:
                kind = "signpost"
            elif "content" not in ok[0]:
                kind = "empty"
            elif "text/html" in ok[0]["content"]:
                kind = "page"
            else:
                schema = ok[0]["content"]["application/json"]["schema"]
                referred = [
                    schemas[ref.rsplit("/", 1)[1]] for ref in re.findall(r"#/components/schemas/\w+", str(schema))
                ]
                assert referred and all(one["type"] == "object" for one in referred), (method, path, schema)
                kind = "object"
            kinds.setdefault(kind, []).append(f"{method.upper()} {path}")
    assert kinds["empty"] == ["POST /oauth2/revoke"]
    assert sorted(kinds["page"]) == [
        "GET /claim",
        "GET /device",
        "GET /oauth2/authorize",
        "POST /claim",
        "POST /device",
    ]
    assert kinds["redirect"] == ["POST /oauth2/authorize"]
    assert len(kinds["signpost"]) == 5
    assert len(kinds["object"]) == 16 and "POST /oauth2/token" in kinds["object"]


def test_the_operator_api_through_its_generated_client(generated: str, emu: Emulator) -> None:
    """The operator's acts as a generated client makes them: a declared state applied as JSON (twice: the second
    changes nothing), the person's approval of an agent's claim, the status; a refusal is the site's ErrorBody with
    the operator's words, and the files are text and bytes."""
    apply, approve, status, ca = _import(
        "gen_site.api.default",
        "operator_apply",
        "operator_claims_approve",
        "operator_status",
        "operator_ca_certificate",
    )
    declared_state, org_decl, user_decl, applied, claim_decision, claim_decided, status_view, error_body = _import(
        "gen_site.models",
        "declared_state",
        "org_decl",
        "user_decl",
        "applied",
        "claim_decision",
        "claim_decided",
        "status_view",
        "error_body",
    )
    state = declared_state.DeclaredState(
        orgs=[org_decl.OrgDecl(name="generated-acme")],
        users=[user_decl.UserDecl(email="gen@example.com", orgs=["generated-acme"])],
    )
    with _client("gen_site", emu.url) as c:
        done = apply.sync_detailed(client=c, body=state)
        assert done.status_code == 200 and isinstance(done.parsed, applied.Applied), done.content
        assert done.parsed.file == "body" and done.parsed.unchanged is False
        assert done.parsed.applied["orgs"].created == 1 and done.parsed.applied["users"].created == 1
        _same_bytes(done.content, Applied)
        again = apply.sync_detailed(client=c, body=state)
        assert isinstance(again.parsed, applied.Applied) and again.parsed.unchanged is True
        assert again.parsed.applied["orgs"].unchanged == 1

        bad = declared_state.DeclaredState(orgs=[org_decl.OrgDecl(name="Not A Slug!")])
        refused = apply.sync_detailed(client=c, body=bad)
        assert refused.status_code == 400 and isinstance(refused.parsed, error_body.ErrorBody)
        assert refused.parsed.error.code == "bad_request"
        assert refused.parsed.error.message.startswith("body: orgs[0].name: ")  # the place, as a file's; no line

        # An agent registers and starts its claim; the person (the operator, playing them) approves it.
        with httpx.Client(timeout=20, transport=httpx.HTTPTransport(local_address=next_ip())) as agent:
            reg = agent.post(emu.auth + "/agent/identity", json={"type": "anonymous"}).raise_for_status().json()
            start = {"type": "service_auth", "claim_token": reg["claim"]["token"]}
            agent.post(emu.auth + "/agent/identity/claim", json=start).raise_for_status()
        decided = approve.sync_detailed(
            client=c, body=claim_decision.ClaimDecision(email="gen@example.com", registration=reg["id"])
        )
        assert decided.status_code == 200 and isinstance(decided.parsed, claim_decided.ClaimDecided), decided.content
        assert decided.parsed.registration == reg["id"] and decided.parsed.approved is True
        assert isinstance(decided.parsed.user_code, str) and len(decided.parsed.user_code) == 6
        _same_bytes(decided.content, ClaimDecided)
        twice = approve.sync_detailed(
            client=c, body=claim_decision.ClaimDecision(email="gen@example.com", registration=reg["id"])
        )
        assert twice.status_code >= 400 and isinstance(twice.parsed, error_body.ErrorBody)

        read = status.sync_detailed(client=c)
        assert read.status_code == 200 and isinstance(read.parsed, status_view.StatusView)
        assert read.parsed.events > 0 and read.parsed.switches["cloud_reachable"] is True
        _same_bytes(read.content, StatusView)
        pem = ca.sync_detailed(client=c)
        assert pem.status_code == 200 and isinstance(pem.parsed, str) and "BEGIN CERTIFICATE" in pem.parsed


def test_every_operator_operation_declares_its_answer_and_its_errors(generated: str) -> None:
    """Under /_emulator: each 2xx is a JSON object (a struct's schema, or a oneOf of them), the event stream of a
    described EventView, or a file in its media type; every operation declares the guard's 401 and 403 and the
    site's envelope as its default, never Litestar's default error."""
    document = msgspec.json.decode((Path(generated) / "site.json").read_bytes())
    schemas = document["components"]["schemas"]
    files = {"application/x-pem-file", "application/gzip"}
    seen = 0
    for path, item in document["paths"].items():
        if not path.startswith("/_emulator"):
            continue
        for method, operation in item.items():
            seen += 1
            responses = operation["responses"]
            assert {"401", "403", "default"} <= set(responses), (method, path)
            assert "status_code" not in str(responses), (method, path)
            assert operation["operationId"].startswith("operator_"), (method, path)
            (ok,) = [r for s, r in responses.items() if s.startswith("2")]
            ((media, content),) = ok["content"].items()
            if media == "text/event-stream":  # each event's data: JSON of an EventView
                data = content["schema"]["properties"]["data"]
                assert data["contentSchema"] == {"$ref": "#/components/schemas/EventView"}
            elif media in files:
                assert content["schema"]["type"] == "string", (method, path)
            else:
                schema = content["schema"]
                refs = re.findall(r"#/components/schemas/(\w+)", str(schema))
                assert refs and all(schemas[ref]["type"] == "object" for ref in refs), (method, path, schema)
    assert seen == 56
    apply_body = document["paths"]["/_emulator/apply"]["post"]["requestBody"]["content"]
    assert apply_body["application/json"]["schema"] == {"$ref": "#/components/schemas/DeclaredState"}
    assert apply_body["application/toml"]["schema"] == {"type": "string"}
