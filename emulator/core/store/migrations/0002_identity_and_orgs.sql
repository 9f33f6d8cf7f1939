-- Agent registrations at the identity provider, their claim attempts and tokens; the people who
-- signed in; organizations (trials among them), their databases and API keys.
CREATE TABLE registrations (
    id               TEXT PRIMARY KEY,              -- agent_reg_…
    type             TEXT NOT NULL CHECK (type IN ('anonymous', 'service_auth')),
    login_hint       TEXT,
    status           TEXT NOT NULL CHECK (status IN ('registered', 'claimed')),
    claim_token_hash TEXT NOT NULL UNIQUE,
    claim_expires_at REAL NOT NULL,
    claimed_email    TEXT,
    claimed_at       REAL,
    trial_org_id     TEXT,                           -- the one trial this registration got (kept after deletion)
    client_ip        TEXT,
    created_at       REAL NOT NULL
);

-- One row per claim attempt; a new attempt supersedes the previous one. The user code is revealed to
-- the person once, on the verification page, and only its hash is kept.
CREATE TABLE claim_attempts (
    id              TEXT PRIMARY KEY,                -- cla_…
    registration_id TEXT NOT NULL REFERENCES registrations (id) ON DELETE CASCADE,
    token_hash      TEXT NOT NULL UNIQUE,            -- the opaque token in the verification URI
    login_hint      TEXT,
    state           TEXT NOT NULL CHECK (state IN ('pending', 'confirmed', 'denied', 'completed', 'superseded')),
    email           TEXT,
    user_code_hash  TEXT,
    code_expires_at REAL,
    expires_at      REAL NOT NULL,
    created_at      REAL NOT NULL
);
CREATE INDEX claim_attempts_registration ON claim_attempts (registration_id, created_at);

CREATE TABLE access_tokens (
    jti             TEXT PRIMARY KEY,
    registration_id TEXT NOT NULL REFERENCES registrations (id) ON DELETE CASCADE,
    scope           TEXT NOT NULL,
    issued_at       REAL NOT NULL,
    expires_at      REAL NOT NULL,
    revoked_at      REAL
);
CREATE INDEX access_tokens_registration ON access_tokens (registration_id);

CREATE TABLE refresh_tokens (
    hash            TEXT PRIMARY KEY,
    registration_id TEXT NOT NULL REFERENCES registrations (id) ON DELETE CASCADE,
    expires_at      REAL NOT NULL,
    spent_at        REAL
);

CREATE TABLE users (
    id         TEXT PRIMARY KEY,                    -- user_…
    email      TEXT NOT NULL UNIQUE COLLATE NOCASE,
    created_at REAL NOT NULL
);

CREATE TABLE orgs (
    id               TEXT PRIMARY KEY,              -- org_…
    slug             TEXT NOT NULL UNIQUE,
    display_name     TEXT,
    trial            INTEGER NOT NULL DEFAULT 0,
    state            TEXT NOT NULL CHECK (state IN ('unclaimed', 'claimed', 'active')),
    registration_id  TEXT,
    network          TEXT,
    claim_token_hash TEXT UNIQUE,
    expires_at       REAL,
    claimed_at       REAL,
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL
);
CREATE INDEX orgs_unclaimed ON orgs (state, expires_at);

CREATE TABLE org_members (
    org_id  TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role    TEXT NOT NULL CHECK (role IN ('admin', 'member')),
    PRIMARY KEY (org_id, user_id)
);

CREATE TABLE databases (
    org_id     TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    state      TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (org_id, name)
);

CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,                    -- key_…
    org_id     TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    key_hash   TEXT NOT NULL UNIQUE,
    key_type   TEXT NOT NULL CHECK (key_type IN ('user', 'runtime')),
    grants     TEXT NOT NULL DEFAULT '[]',
    created_by TEXT,
    created_at REAL NOT NULL,
    UNIQUE (org_id, name)
);
