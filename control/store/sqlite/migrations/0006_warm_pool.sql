-- The k8s provider's warm pool: booted pods of a profile waiting to be
-- claimed by a create. claimed_by is unique, so a sandbox holds at most one.
CREATE TABLE warm_pods (
    pod        TEXT PRIMARY KEY,
    profile    TEXT NOT NULL,
    image      TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    claimed_by TEXT UNIQUE,
    claimed_at INTEGER
) STRICT;
CREATE INDEX warm_pods_free ON warm_pods (profile, created_at) WHERE claimed_by IS NULL;
