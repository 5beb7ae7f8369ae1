-- The egress log is pruned by age (lifecycle's EgressLogRetention), oldest
-- first: without this the sweep would scan the whole table.
CREATE INDEX egress_log_at ON egress_log (at);
