-- Agent identity, both sides: registrations by ID-JAG (an upstream issuer's identity assertion), revocation,
-- the service side's API keys, the WorkOS-shaped registration events and their webhook deliveries.
-- The registrations table is rebuilt (SQLite cannot widen a CHECK); the runner applies migrations with
-- foreign keys off and checks them before it commits, so the rows that refer to it are kept.
CREATE TABLE registrations_new (
    id               TEXT PRIMARY KEY,              -- agent_reg_…
    type             TEXT NOT NULL CHECK (type IN ('anonymous', 'service_auth', 'identity_assertion')),
    login_hint       TEXT,
    status           TEXT NOT NULL CHECK (status IN ('registered', 'claimed')),
    claim_token_hash TEXT NOT NULL UNIQUE,
    claim_expires_at REAL NOT NULL,
    claimed_email    TEXT,
    claimed_at       REAL,
    trial_org_id     TEXT,                           -- the one trial this registration got (kept after deletion)
    client_ip        TEXT,
    created_at       REAL NOT NULL,
    updated_at       REAL,                           -- the last change of its state (NULL: never changed)
    revoked_at       REAL,                           -- revoked by the service side: nothing issued from it works
    expired_at       REAL,                           -- when its unclaimed claim window was seen closed
    upstream_iss     TEXT,                           -- an ID-JAG registration's upstream issuer and subject
    upstream_sub     TEXT
);
INSERT INTO registrations_new (id, type, login_hint, status, claim_token_hash, claim_expires_at, claimed_email,
                               claimed_at, trial_org_id, client_ip, created_at)
    SELECT id, type, login_hint, status, claim_token_hash, claim_expires_at, claimed_email, claimed_at,
           trial_org_id, client_ip, created_at FROM registrations;
DROP TABLE registrations;
ALTER TABLE registrations_new RENAME TO registrations;
CREATE INDEX registrations_unclaimed ON registrations (status, claim_expires_at);

-- A person's id in the service's own user store (the service side's link_external_user).
ALTER TABLE users ADD COLUMN external_id TEXT;
CREATE UNIQUE INDEX users_external_id ON users (external_id) WHERE external_id IS NOT NULL;

-- Which person an upstream identity (iss, sub) is: made when an ID-JAG registers for a new person, or when
-- the claim an `interaction_required` answer started is completed.
CREATE TABLE identity_links (
    iss        TEXT NOT NULL,
    sub        TEXT NOT NULL,
    user_id    TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at REAL NOT NULL,
    PRIMARY KEY (iss, sub)
);

-- The `jti` of every ID-JAG accepted, until it expires: a replay is refused (a refused one is not spent).
CREATE TABLE idjag_jtis (
    iss        TEXT NOT NULL,
    jti        TEXT NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (iss, jti)
);

-- The service side's API keys (`Authorization: Bearer sk_test_…` on /agents/*), stored as hashes.
CREATE TABLE service_keys (
    id         TEXT PRIMARY KEY,                    -- skey_…
    name       TEXT NOT NULL,
    key_hash   TEXT NOT NULL UNIQUE,
    hint       TEXT NOT NULL,                       -- the key's last four characters, to tell keys apart
    created_at REAL NOT NULL,
    revoked_at REAL
);

-- Registration events as WorkOS sends them ({object: event, id, event, data, created_at}), in order.
CREATE TABLE agent_events (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,            -- event_…
    event           TEXT NOT NULL,                   -- agent.registration.created, …
    registration_id TEXT,                            -- not a reference: a deleted registration's events stay
    data            TEXT NOT NULL,                   -- the event's `data` object, JSON
    created_at      REAL NOT NULL
);
CREATE INDEX agent_events_registration ON agent_events (registration_id, seq);

-- Where the events go: a URL, the events it takes (`[]`: all), its signing secret sealed with the secrets' key.
CREATE TABLE webhook_endpoints (
    id          TEXT PRIMARY KEY,                   -- we_…
    url         TEXT NOT NULL,
    events      TEXT NOT NULL DEFAULT '[]',
    secret_box  BLOB NOT NULL,
    created_at  REAL NOT NULL,
    disabled_at REAL
);

-- One delivery per (endpoint, event), written with the event (an outbox); each try is recorded.
CREATE TABLE webhook_deliveries (
    id          TEXT PRIMARY KEY,                   -- whd_…
    endpoint_id TEXT NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_id    TEXT NOT NULL REFERENCES agent_events (id) ON DELETE CASCADE,
    state       TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts    INTEGER NOT NULL DEFAULT 0,
    next_at     REAL,                               -- emulator time of the next try (pending only)
    created_at  REAL NOT NULL,
    UNIQUE (endpoint_id, event_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (state, next_at);

CREATE TABLE webhook_attempts (
    delivery_id TEXT NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    at          REAL NOT NULL,                      -- emulator time
    status      INTEGER,                            -- the receiver's HTTP status; NULL when none came
    error       TEXT,                               -- why it failed: a status, a refused connection, a timeout
    ms          REAL NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
);
