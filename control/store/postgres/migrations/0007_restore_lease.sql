-- A restore is leased: the process restoring a sandbox renews lease_until
-- every second or two, and the backstop sweep takes over a restoring
-- sandbox whose lease ran out (its restorer died). restore_attempts counts
-- attempts against the restore budget, across processes.
ALTER TABLE sandboxes ADD COLUMN lease_holder text NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN lease_until timestamptz;
ALTER TABLE sandboxes ADD COLUMN restore_attempts integer NOT NULL DEFAULT 0
    CHECK (restore_attempts >= 0);
