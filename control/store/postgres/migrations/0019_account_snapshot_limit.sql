-- How many snapshots (creating or ready) the account may keep at once;
-- 0: the deployment's default (control's MaxSnapshots).
ALTER TABLE accounts ADD COLUMN snapshot_limit INTEGER NOT NULL DEFAULT 0;
