-- Ports exposed as preview hosts by POST /sandboxes/{id}/ports. The label
-- is the random DNS label of <label>.preview.<domain>; the edge resolves
-- hosts by it.
CREATE TABLE preview_ports (
    sandbox_id  TEXT NOT NULL REFERENCES sandboxes (id),
    port        INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
    account_id  TEXT NOT NULL REFERENCES accounts (id),
    label       TEXT NOT NULL UNIQUE,
    access      TEXT NOT NULL CHECK (access IN ('private', 'public')),
    host_policy TEXT NOT NULL CHECK (host_policy IN ('forward', 'localhost')),
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (sandbox_id, port)
) STRICT;
