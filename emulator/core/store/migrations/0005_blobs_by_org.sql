-- An archive is recorded once per organization that uploaded it: whether one exists is answered within the
-- caller's organization only (prepare_update told any organization whether another had uploaded the same
-- archive). The files stay shared by hash; a row goes with its organization.
CREATE TABLE blobs_by_org (
    sha256     TEXT NOT NULL,
    org_id     TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    size       INTEGER NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (sha256, org_id)
);
INSERT INTO blobs_by_org (sha256, org_id, size, created_at)
    SELECT sha256, org_id, size, created_at FROM blobs WHERE org_id IN (SELECT id FROM orgs);
DROP TABLE blobs;
ALTER TABLE blobs_by_org RENAME TO blobs;
