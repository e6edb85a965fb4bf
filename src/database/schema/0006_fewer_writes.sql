-- What each claim and completion wrote for nothing.
-- A task's latest receipt is read backwards along the primary key
-- (task_id, attempt); an index of its own was written on every completion.
DROP INDEX receipts_latest;
-- Handles, receipts and staged parts are written only by statements that
-- lock or change their task's row, and tasks are never deleted: the
-- foreign keys' checks ran on every claim and completion for nothing.
ALTER TABLE handles DROP CONSTRAINT handles_task_id_fkey;
ALTER TABLE receipts DROP CONSTRAINT receipts_task_id_fkey;
ALTER TABLE staged DROP CONSTRAINT staged_task_id_fkey;
-- Old events are pruned along the primary key, (xid, id): rows are
-- written in transaction order, and so near enough in time order.
DROP INDEX events_at;
