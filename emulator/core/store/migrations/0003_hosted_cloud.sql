-- The hosted cloud: databases' desired and current state with generations and receipts, uploaded
-- blobs, provider secrets, log lines, and `pxt login` sessions.
ALTER TABLE databases ADD COLUMN id TEXT;                 -- db_… (the receipts' resource_id)
ALTER TABLE databases ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE databases ADD COLUMN target TEXT;             -- DatabaseResources JSON (desired), null = none yet
ALTER TABLE databases ADD COLUMN current TEXT;            -- DatabaseResources JSON (running)
ALTER TABLE databases ADD COLUMN receipt TEXT;            -- GenerationReceipt JSON of the current generation
ALTER TABLE databases ADD COLUMN archive_sha256 TEXT;     -- the blob of the current project archive
ALTER TABLE databases ADD COLUMN last_build_outcome TEXT;
ALTER TABLE databases ADD COLUMN last_build_error TEXT;
ALTER TABLE databases ADD COLUMN failure_reason TEXT;
ALTER TABLE databases ADD COLUMN env_digest TEXT;         -- the environment (virtualenv) it runs on
ALTER TABLE databases ADD COLUMN started_at REAL;
ALTER TABLE databases ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0;

-- Every receipt ever issued, so get_receipts can answer for any generation.
CREATE TABLE receipts (
    kind        TEXT NOT NULL,
    resource_id TEXT NOT NULL,
    generation  INTEGER NOT NULL,
    org_id      TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    body        TEXT NOT NULL,                            -- GenerationReceipt JSON
    submission  TEXT,                                     -- sha256 of the accepted submission (idempotent resend)
    PRIMARY KEY (kind, resource_id, generation)
);

CREATE TABLE blobs (
    sha256     TEXT PRIMARY KEY,
    org_id     TEXT NOT NULL,
    size       INTEGER NOT NULL,
    created_at REAL NOT NULL
);

-- Provider secrets must reach processes as environment variables, so they are encrypted, not hashed.
CREATE TABLE secrets (
    org_id     TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    db         TEXT NOT NULL DEFAULT '',                  -- '' for an org-wide secret
    key        TEXT NOT NULL,
    value      BLOB NOT NULL,                             -- Fernet token
    revision   INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (org_id, db, key)
);

CREATE TABLE log_lines (
    id      INTEGER PRIMARY KEY,
    org_id  TEXT NOT NULL,
    db      TEXT NOT NULL,
    service TEXT NOT NULL DEFAULT '',                     -- '' for the database itself
    ts_ms   INTEGER NOT NULL,
    line    TEXT NOT NULL,
    health  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX log_lines_resource ON log_lines (org_id, db, service, id);

-- `pxt login`: device authorizations and the sessions they grant (refresh tokens hashed).
CREATE TABLE device_logins (
    device_code_hash TEXT PRIMARY KEY,
    user_code        TEXT NOT NULL UNIQUE,               -- shown to the person; not a credential by itself
    client_id        TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'redeemed')),
    email            TEXT,
    expires_at       REAL NOT NULL,
    created_at       REAL NOT NULL
);

CREATE TABLE sessions (
    id                 TEXT PRIMARY KEY,                  -- sid
    user_id            TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    org_id             TEXT,
    refresh_token_hash TEXT NOT NULL UNIQUE,
    refresh_expires_at REAL NOT NULL,
    created_at         REAL NOT NULL,
    revoked_at         REAL
);
