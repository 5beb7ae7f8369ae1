-- The sandbox model people expect: a name (unique among an account's
-- sandboxes that have not ended, so a name can be reused once its sandbox
-- is gone), labels, and whether traffic may wake it once suspended.
-- state_since is when the sandbox entered its current state: the sweep
-- that settles sandboxes stuck in suspending or restoring measures it.
ALTER TABLE sandboxes ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
ALTER TABLE sandboxes ADD COLUMN no_wake_on_traffic INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN state_since INTEGER NOT NULL DEFAULT 0;
UPDATE sandboxes SET state_since = coalesce(suspended_at, ready_at, created_at);
CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes (account_id, name)
    WHERE name <> '' AND state NOT IN ('terminating', 'terminated', 'failed');
