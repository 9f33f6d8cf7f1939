-- The authorization code grant (OAuth 2.1, PKCE S256): the codes a person's approval made, each single-use and
-- bound to its client, redirect URI, PKCE challenge and resource; and the refresh tokens the grant issues (a
-- person's, bound to the client). Both stored as hashes only.
CREATE TABLE authorization_codes (
    code_hash      TEXT PRIMARY KEY,
    client_id      TEXT NOT NULL,
    redirect_uri   TEXT NOT NULL,
    code_challenge TEXT NOT NULL,
    resource       TEXT NOT NULL,
    scope          TEXT NOT NULL,
    user_id        TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    expires_at     REAL NOT NULL,
    used_at        REAL,
    created_at     REAL NOT NULL
);

CREATE TABLE person_refresh_tokens (
    hash       TEXT PRIMARY KEY,
    client_id  TEXT NOT NULL,
    user_id    TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    resource   TEXT NOT NULL,
    scope      TEXT NOT NULL,
    expires_at REAL NOT NULL,
    spent_at   REAL
);
