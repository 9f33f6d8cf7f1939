-- Hosted service instances, one row per (database, base_path, name); each database's own gateway port.
ALTER TABLE databases ADD COLUMN gateway_port INTEGER;

CREATE TABLE services (
    id          TEXT PRIMARY KEY,                      -- svc_… (the receipts' resource_id)
    org_id      TEXT NOT NULL,
    db          TEXT NOT NULL,
    base_path   TEXT NOT NULL DEFAULT '',
    name        TEXT NOT NULL,
    generation  INTEGER NOT NULL,
    desired     TEXT NOT NULL,                         -- the ServiceMutation JSON last accepted
    state       TEXT NOT NULL,
    error       TEXT,
    fingerprint TEXT,                                  -- what its pod reported (report_service_instance)
    receipt     TEXT,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL,
    FOREIGN KEY (org_id, db) REFERENCES databases (org_id, name) ON DELETE CASCADE,
    UNIQUE (org_id, db, base_path, name)
);
