-- Services a sandbox declares (PUT /sandboxes/{id}/services/{name}); the
-- sandbox's init runs them. args and env are JSON (a list of strings and
-- an object of strings).
CREATE TABLE services (
    sandbox_id TEXT NOT NULL REFERENCES sandboxes (id),
    name       TEXT NOT NULL,
    command    TEXT NOT NULL,
    args       TEXT NOT NULL DEFAULT '[]',
    cwd        TEXT NOT NULL DEFAULT '',
    env        TEXT NOT NULL DEFAULT '{}',
    port       INTEGER NOT NULL DEFAULT 0 CHECK (port BETWEEN 0 AND 65535),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (sandbox_id, name)
) STRICT;
