-- Where the sandbox's TCP forwarder listens (host:port), reachable from
-- the edge only; empty when the sandbox has none and the edge takes the
-- SSH road to its ports.
ALTER TABLE sandboxes ADD COLUMN forward_endpoint TEXT NOT NULL DEFAULT '';
