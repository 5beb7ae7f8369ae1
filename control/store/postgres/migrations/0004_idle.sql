-- Idle offload: an account may override the deployment's idle timeout
-- (NULL: the default applies).
ALTER TABLE accounts ADD COLUMN idle_timeout_seconds integer
    CHECK (idle_timeout_seconds IS NULL OR idle_timeout_seconds > 0);
-- The idle detector's scan: ready sandboxes and their open compute line.
CREATE INDEX sandbox_sessions_open ON sandbox_sessions (sandbox_id)
    WHERE ended_at IS NULL;
