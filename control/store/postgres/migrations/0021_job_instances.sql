-- Job clients that run under a fixed instance name (--jobs-instance). Each
-- holds a session advisory lock keyed by its name while it runs; a job
-- left running by a listed instance whose lock is free belongs to a dead
-- process, and another replica puts it back in the queue at once instead
-- of after River's stuck-job rescue.
CREATE TABLE job_instances (
    instance TEXT PRIMARY KEY,
    first_seen TIMESTAMPTZ NOT NULL DEFAULT now()
);
