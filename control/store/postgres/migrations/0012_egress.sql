-- A sandbox's own egress policy ({"egress": ..., "allow": [...]}), within
-- its profile's; '' follows the profile's.
ALTER TABLE sandboxes ADD COLUMN network text NOT NULL DEFAULT '';
