-- Each account's count of sandboxes holding a pod (store.PodStates), kept
-- by triggers on sandboxes so that admission reads one row under the
-- account lock instead of counting up to the account's whole fleet while
-- every other create in the account waits for it.
--
-- The triggers are deferred constraint triggers: a transaction's changes
-- reach the counter row at its commit, so the row lock that the update
-- takes is held only from then to the commit's end (a destroy's or a
-- suspend's counter update does not wait on, or hold up, anything for the
-- length of its transaction). A transaction that needs its own changes
-- counted before that (admission, under the account lock) runs
-- SET CONSTRAINTS sandboxes_live_insert, sandboxes_live_update,
-- sandboxes_live_delete IMMEDIATE, which applies them at once (see the
-- store's LockAccountHolding).
CREATE TABLE account_live_sandboxes (
    account_id text PRIMARY KEY REFERENCES accounts (id) ON DELETE CASCADE,
    n          integer NOT NULL
);

-- sbx_holds_pod is store.PodStates: the one copy of the list in SQL (a
-- store test checks the counter against a count of every state).
CREATE FUNCTION sbx_holds_pod(state text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT state IN ('pending', 'ready', 'suspending', 'restoring') $$;

-- The triggers' WHEN clauses only queue rows whose change moves a count,
-- so this function only ever adds or takes one.
CREATE FUNCTION sbx_count_live_sandboxes() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND sbx_holds_pod(OLD.state) THEN
        UPDATE account_live_sandboxes SET n = n - 1 WHERE account_id = OLD.account_id;
    END IF;
    IF TG_OP <> 'DELETE' AND sbx_holds_pod(NEW.state) THEN
        INSERT INTO account_live_sandboxes AS c (account_id, n) VALUES (NEW.account_id, 1)
            ON CONFLICT (account_id) DO UPDATE SET n = c.n + 1;
    END IF;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER sandboxes_live_insert AFTER INSERT ON sandboxes
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (sbx_holds_pod(NEW.state))
    EXECUTE FUNCTION sbx_count_live_sandboxes();
CREATE CONSTRAINT TRIGGER sandboxes_live_update AFTER UPDATE OF state, account_id ON sandboxes
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (sbx_holds_pod(OLD.state) <> sbx_holds_pod(NEW.state)
          OR (OLD.account_id <> NEW.account_id AND sbx_holds_pod(OLD.state)))
    EXECUTE FUNCTION sbx_count_live_sandboxes();
CREATE CONSTRAINT TRIGGER sandboxes_live_delete AFTER DELETE ON sandboxes
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (sbx_holds_pod(OLD.state))
    EXECUTE FUNCTION sbx_count_live_sandboxes();

-- The backfill runs after CREATE TRIGGER, whose lock on sandboxes waits
-- for every writer in flight and holds off new ones until this migration
-- commits: no change is counted twice or missed.
INSERT INTO account_live_sandboxes (account_id, n)
    SELECT account_id, count(*) FROM sandboxes WHERE sbx_holds_pod(state) GROUP BY account_id;
