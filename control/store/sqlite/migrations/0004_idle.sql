-- Idle offload: an account may override the deployment's idle timeout
-- (NULL: the default applies).
ALTER TABLE accounts ADD COLUMN idle_timeout_seconds INTEGER
    CHECK (idle_timeout_seconds IS NULL OR idle_timeout_seconds > 0);
