-- Services a sandbox declares (PUT /sandboxes/{id}/services/{name}); the
-- sandbox's init runs them. args and env are JSON (a list of strings and
-- an object of strings).
CREATE TABLE services (
    sandbox_id text NOT NULL REFERENCES sandboxes (id),
    name       text NOT NULL,
    command    text NOT NULL,
    args       text NOT NULL DEFAULT '[]',
    cwd        text NOT NULL DEFAULT '',
    env        text NOT NULL DEFAULT '{}',
    port       integer NOT NULL DEFAULT 0 CHECK (port BETWEEN 0 AND 65535),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (sandbox_id, name)
);
