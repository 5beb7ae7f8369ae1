-- Ports exposed as preview hosts by POST /sandboxes/{id}/ports. The label
-- is the random DNS label of <label>.preview.<domain>; the edge resolves
-- hosts by it.
CREATE TABLE preview_ports (
    sandbox_id  text NOT NULL REFERENCES sandboxes (id),
    port        integer NOT NULL CHECK (port BETWEEN 1 AND 65535),
    account_id  text NOT NULL REFERENCES accounts (id),
    label       text NOT NULL UNIQUE,
    access      text NOT NULL CHECK (access IN ('private', 'public')),
    host_policy text NOT NULL CHECK (host_policy IN ('forward', 'localhost')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (sandbox_id, port)
);
