-- The sandbox model people expect: a name (unique among an account's
-- sandboxes that have not ended, so a name can be reused once its sandbox
-- is gone), labels, and whether traffic may wake it once suspended.
-- state_since is when the sandbox entered its current state: the sweep
-- that settles sandboxes stuck in suspending or restoring measures it.
ALTER TABLE sandboxes ADD COLUMN name text NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN labels jsonb NOT NULL DEFAULT '{}';
ALTER TABLE sandboxes ADD COLUMN no_wake_on_traffic boolean NOT NULL DEFAULT false;
ALTER TABLE sandboxes ADD COLUMN state_since timestamptz;
UPDATE sandboxes SET state_since = coalesce(suspended_at, ready_at, created_at);
ALTER TABLE sandboxes ALTER COLUMN state_since SET NOT NULL;
ALTER TABLE sandboxes ALTER COLUMN state_since SET DEFAULT now();
CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes (account_id, name)
    WHERE name <> '' AND state NOT IN ('terminating', 'terminated', 'failed');
CREATE INDEX sandboxes_labels ON sandboxes USING gin (labels);
