"""The one authenticator: any credential (API key, trial key, a hosted workload's runtime key, a `pxt login`
session token) becomes a `Caller`, for the control plane, the database tunnel and the service gateways alike.

`X-api-key` is checked before `Authorization: Bearer`; a request carrying both is authenticated as the API
key. The tunnel and the gateways send every credential as a bearer token, so a key is recognised there by its
shape (`pxtk_…`). A session token is an ES256 JWT of this issuer whose audience is the control plane. So is a
person's access token (`typ: at+jwt`, from the authorization code or ID-JAG grant with the control plane as its
resource): it is the same kind of caller as a session, with no organization chosen. An API key acts in its own
organization only; a session acts in the organizations its person belongs to, by default the one its token is
scoped to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from emulator.core.context import Core
from emulator.core.errors import BAD_REQUEST, FORBIDDEN, UNAUTHORIZED, ApiError
from emulator.core.store import one
from emulator.hosted import keys, orgs
from emulator.hosted.keys import GRANT
from emulator.identity.signing import ACCESS_TOKEN_TYP, AgentClaims, InvalidToken, PersonClaims, SessionClaims, Signer

# Where the control plane describes itself as an OAuth protected resource (RFC 9728).
RESOURCE_METADATA = "/.well-known/oauth-protected-resource"


@dataclass(frozen=True)
class Caller:
    credential: str  # "api_key" | "session"
    user_id: str | None  # the person (session, or the key's creator when known)
    email: str | None
    org_id: str | None  # the organization the credential is scoped to (None: a session with no org yet)
    org: str | None
    key_name: str | None = None
    trial: bool = False
    grants: tuple[str, ...] | None = None  # a key created with grants acts as nothing but them; None: unrestricted

    @property
    def label(self) -> str:
        return f"key {self.key_name}" if self.credential == "api_key" else f"session of {self.email}"


@dataclass
class RuntimeKeys:
    """The keys hosted workloads call the control plane with (get_archive, media): in memory only, one per
    organization, never stored."""

    _owners: dict[str, tuple[str, str]] = field(default_factory=dict)

    def clear(self) -> None:
        self._owners.clear()

    def owner(self, key: str) -> tuple[str, str] | None:
        return self._owners.get(key)

    def forget(self, org_id: str) -> None:
        """The organization is gone: its workloads' key with it."""
        for key in [k for k, (owner, _) in self._owners.items() if owner == org_id]:
            del self._owners[key]

    def for_org(self, core: Core, org_id: str, slug: str) -> str:
        for key, owner in self._owners.items():
            if owner == (org_id, slug):
                return key
        key = core.ids.token("pxtk_runtime_", 24)
        self._owners[key] = (org_id, slug)
        return key


class Authenticator:
    def __init__(self, core: Core, signer: Signer, api_url: str) -> None:
        self.core = core
        self.signer = signer
        self.api_url = api_url
        self.runtime_keys = RuntimeKeys()

    async def from_headers(self, headers: Mapping[str, str]) -> Caller:
        """The caller of a management request: `X-api-key` first, then `Authorization: Bearer`."""
        key = headers.get("x-api-key")
        if key is not None:
            return await self.credential(key.strip(), bearer=False)
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            try:
                return await self.credential(token.strip(), bearer=True)
            except ApiError as e:
                if e.status != 401:
                    raise
                challenge = self.challenge(f', error="invalid_token", error_description="{e.message}"')
                raise ApiError(e.status, e.code, e.message, headers={**e.headers, **challenge}) from None
        raise UNAUTHORIZED("an API key (X-api-key) or a bearer token is required", headers=self.challenge())

    def challenge(self, detail: str = "") -> dict[str, str]:
        """RFC 9728 §5.1: where a bearer token was expected, the 401 says where an OAuth client learns who issues one
        (a person's token for this control plane). An API key's refusal has none: it is the pxt client's, which
        reads only the body."""
        return {"WWW-Authenticate": f'Bearer resource_metadata="{self.api_url}{RESOURCE_METADATA}"{detail}'}

    async def credential(self, credential: str, *, bearer: bool) -> Caller:
        """Any credential by its shape: a hosted workload's runtime key, an API key (`pxtk_…`), or a session token
        (or a person's access token)."""
        runtime = self.runtime_keys.owner(credential)
        if runtime is not None:
            return Caller("api_key", None, None, runtime[0], runtime[1], "runtime", False)
        if not bearer or credential.startswith("pxtk_"):
            return await self._key(credential)
        return await self._session(credential)

    async def _key(self, secret: str) -> Caller:
        found = await keys.live_owner(self.core.store, secret)
        if found is None:
            raise UNAUTHORIZED(
                "the API key is not valid (a trial's key stops working when the trial expires, or when the agent "
                "registration it was issued to is revoked)"
            )
        org, key = found
        grants = tuple(key.grants) if key.grants else None
        return Caller("api_key", None, None, org.id, org.slug, key.name, org.trial, grants)

    async def _session(self, token: str) -> Caller:
        try:
            typ, claims = self.signer.verify(token)
        except InvalidToken:
            raise UNAUTHORIZED("the bearer token is not valid") from None
        if typ != ACCESS_TOKEN_TYP or isinstance(claims, AgentClaims) or claims.aud != self.api_url:
            raise UNAUTHORIZED("the bearer token was not issued for this control plane")
        if claims.exp <= self.core.clock.now():
            raise UNAUTHORIZED(f"the {'session' if isinstance(claims, SessionClaims) else 'access'} token has expired")
        if isinstance(claims, PersonClaims):
            return await self._person(claims)
        # the sessions table is the identity provider's; it is only read here
        session = await one(
            self.core.store,
            "SELECT s.revoked_at, u.id AS user_id, u.email FROM sessions s JOIN users u ON u.id = s.user_id "
            "WHERE s.id = ?",
            (claims.sid,),
        )
        if session is None or session["revoked_at"] is not None:
            raise UNAUTHORIZED("the session was signed out")
        org_id = claims.org_id or None
        slug = None
        if org_id:
            org = await orgs.member_org(self.core.store, session["user_id"], org_id)
            if org is None:
                raise FORBIDDEN("this session's person is not a member of its organization")
            slug = org.slug
        return Caller("session", session["user_id"], session["email"], org_id, slug)

    async def _person(self, claims: PersonClaims) -> Caller:
        """A person's access token (the authorization code or ID-JAG grant, aud this control plane): the person, as
        a session with no organization chosen (the request's `org` names one). No session backs it: it ends when it
        expires, or when the person is deleted."""
        # the users table is the identity provider's; it is only read here
        person = await one(self.core.store, "SELECT id, email FROM users WHERE id = ?", (claims.sub,))
        if person is None:
            raise UNAUTHORIZED("the access token's person no longer exists")
        return Caller("session", person["id"], person["email"], None, None)

    async def resolve_org(self, caller: Caller, org: str | None) -> tuple[str, str]:
        """(org id, slug) a request acts on: its `org` field if set, else the credential's organization."""
        if caller.credential == "api_key":
            if org is not None and org != caller.org:
                raise FORBIDDEN(f"this API key belongs to {caller.org}, not {org}")
            assert caller.org_id is not None and caller.org is not None
            return caller.org_id, caller.org
        if org is None:
            if caller.org_id is None or caller.org is None:
                raise BAD_REQUEST("no organization is selected; create one with pxt org create")
            return caller.org_id, caller.org
        assert caller.user_id is not None
        found = await orgs.member_org(self.core.store, caller.user_id, org)
        if found is None:
            raise FORBIDDEN(f"{caller.email} is not a member of {org}")
        return found.id, found.slug

    async def admits(self, credential: str, slug: str, db: str, service: str) -> ApiError | None:
        """Whether `credential` may call a service of `slug:db` (the gateways' check): None if so, else the refusal."""
        try:
            caller = await self.credential(credential, bearer=True)
            await self.resolve_org(caller, slug)
            require(caller, "access", slug, db, service)
        except ApiError as e:
            return e
        return None


def _grant_allows(grant: str, verb: str, org: str, db: str, service: str | None) -> bool:
    """A grant `access|manage:pxt://org:db[/services[/label]]` against an act on a database (service None) or on a
    service (its label); `manage` of services includes calling them."""
    m = GRANT.match(grant)
    if m is None or m.group(2) != org or m.group(3) != db:
        return False
    if service is None:
        return m.group(1) == "access" and not m.group(4)
    if not m.group(4) or (verb == "manage" and m.group(1) != "manage"):
        return False
    scoped = (m.group(5) or "").strip("/")
    return not scoped or scoped == service


def require(caller: Caller, verb: str, org: str, db: str, service: str | None = None) -> None:
    """Refuse (403) an act a grant-scoped key's grants do not name; unrestricted credentials pass."""
    if caller.grants is None:
        return
    if not any(_grant_allows(g, verb, org, db, service) for g in caller.grants):
        what = f"{verb} pxt://{org}:{db}" + (f"/services/{service}" if service else "")
        raise FORBIDDEN(f"key {caller.key_name}'s grants ({', '.join(caller.grants)}) do not allow {what}")


def require_unrestricted(caller: Caller, operation: str) -> None:
    if caller.grants is not None:
        raise FORBIDDEN(
            f"key {caller.key_name} acts only as its grants ({', '.join(caller.grants)}), "
            f"which do not allow {operation}",
        )
