-- Keys are read by every daemon: each looks for the rows written by
-- transactions its last look could not see (`changed` at or above that
-- look's pg_snapshot_xmin), so an issue or a revocation on one daemon
-- reaches the others within a second.
ALTER TABLE keys ADD COLUMN changed xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX keys_changed ON keys (changed);
