-- What each claim, completion and enqueue wrote or checked for nothing.
-- A task's latest receipt is read backwards along the primary key
-- (task_id, attempt); an index of its own was written on every completion.
DROP INDEX receipts_latest;
-- No foreign keys on the rows of tasks: they are written only by
-- statements that decided them on the rows they name (a task's queue read
-- in the enqueue's transaction, a parent or an upstream locked in it, a
-- task's own row held by the claim or completion writing its handle,
-- receipt or staged part), and neither tasks nor queues are ever deleted.
-- Their checks were two thirds of a task row's insert, and one more
-- statement per claim and completion.
ALTER TABLE tasks DROP CONSTRAINT tasks_queue_fkey;
ALTER TABLE tasks DROP CONSTRAINT tasks_parent_fkey;
ALTER TABLE task_deps DROP CONSTRAINT task_deps_upstream_fkey;
ALTER TABLE task_deps DROP CONSTRAINT task_deps_downstream_fkey;
ALTER TABLE handles DROP CONSTRAINT handles_task_id_fkey;
ALTER TABLE receipts DROP CONSTRAINT receipts_task_id_fkey;
ALTER TABLE staged DROP CONSTRAINT staged_task_id_fkey;
-- Old events are pruned along the primary key, (xid, id): rows are
-- written in transaction order, and so near enough in time order.
DROP INDEX events_at;
