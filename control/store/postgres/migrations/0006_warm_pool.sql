-- The k8s provider's warm pool: booted pods of a profile waiting to be
-- claimed by a create. claimed_by is unique, so a sandbox holds at most one.
CREATE TABLE warm_pods (
    pod        text PRIMARY KEY,
    profile    text NOT NULL,
    image      text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    claimed_by text UNIQUE,
    claimed_at timestamptz
);
CREATE INDEX warm_pods_free ON warm_pods (profile, created_at) WHERE claimed_by IS NULL;
