-- Foundation: settings that survive restarts, the event journal, idempotency records, the docs index.
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE events (
    seq     INTEGER PRIMARY KEY,
    ts      REAL NOT NULL,
    kind    TEXT NOT NULL,
    subject TEXT,
    data    TEXT NOT NULL
);
CREATE INDEX events_kind ON events (kind, seq);

-- One row per (scope, key). `state` is 'pending' while the first request runs, then 'done'.
CREATE TABLE idempotency (
    scope       TEXT NOT NULL,
    key         TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('pending', 'done')),
    status      INTEGER,
    headers     TEXT,
    body        BLOB,
    created_at  REAL NOT NULL,
    expires_at  REAL,
    PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_expiry ON idempotency (expires_at);

CREATE TABLE docs_pages (
    id          INTEGER PRIMARY KEY,
    path        TEXT NOT NULL UNIQUE,
    url         TEXT NOT NULL,
    title       TEXT NOT NULL,
    description TEXT NOT NULL,
    body        TEXT NOT NULL
);

-- One row per passage (a page's `##` section); rowid = docs_passages_meta.id.
-- Prose and code examples are separate columns so that a word in an example weighs less.
CREATE VIRTUAL TABLE docs_fts USING fts5 (
    title, heading, body, code,
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TABLE docs_passages (
    id      INTEGER PRIMARY KEY,
    page_id INTEGER NOT NULL REFERENCES docs_pages (id) ON DELETE CASCADE,
    heading TEXT NOT NULL,
    body    TEXT NOT NULL
);
