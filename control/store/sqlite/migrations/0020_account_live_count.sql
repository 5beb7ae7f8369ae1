-- Each account's count of sandboxes holding a pod (store.PodStates), kept
-- by triggers on sandboxes so that admission reads one row instead of
-- counting the account's whole fleet. SQLite serialises writers, so the
-- triggers run at once (Postgres defers its own to the commit); a
-- transaction sees its own changes counted either way. The state list is
-- store.PodStates (a store test checks the counter against a count of
-- every state).
CREATE TABLE account_live_sandboxes (
    account_id TEXT PRIMARY KEY REFERENCES accounts (id) ON DELETE CASCADE,
    n          INTEGER NOT NULL
) STRICT;

CREATE TRIGGER sandboxes_live_insert AFTER INSERT ON sandboxes
    WHEN NEW.state IN ('pending', 'ready', 'suspending', 'restoring')
BEGIN
    INSERT INTO account_live_sandboxes (account_id, n) VALUES (NEW.account_id, 1)
        ON CONFLICT (account_id) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER sandboxes_live_update AFTER UPDATE OF state, account_id ON sandboxes
    WHEN (OLD.state IN ('pending', 'ready', 'suspending', 'restoring')) <> (NEW.state IN ('pending', 'ready', 'suspending', 'restoring'))
      OR (OLD.account_id <> NEW.account_id AND NEW.state IN ('pending', 'ready', 'suspending', 'restoring'))
BEGIN
    UPDATE account_live_sandboxes SET n = n - 1
        WHERE account_id = OLD.account_id AND OLD.state IN ('pending', 'ready', 'suspending', 'restoring');
    INSERT INTO account_live_sandboxes (account_id, n)
        SELECT NEW.account_id, 1 WHERE NEW.state IN ('pending', 'ready', 'suspending', 'restoring')
        ON CONFLICT (account_id) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER sandboxes_live_delete AFTER DELETE ON sandboxes
    WHEN OLD.state IN ('pending', 'ready', 'suspending', 'restoring')
BEGIN
    UPDATE account_live_sandboxes SET n = n - 1 WHERE account_id = OLD.account_id;
END;

INSERT INTO account_live_sandboxes (account_id, n)
    SELECT account_id, count(*) FROM sandboxes
    WHERE state IN ('pending', 'ready', 'suspending', 'restoring')
    GROUP BY account_id;
