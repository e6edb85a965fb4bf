-- Tasks in the order they were made (ids are random): claims, listings
-- and a family's state go oldest first, as in the embedded queue.
ALTER TABLE tasks ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;
CREATE UNIQUE INDEX tasks_seq ON tasks (seq);
DROP INDEX tasks_ready;
CREATE INDEX tasks_ready ON tasks (queue, priority DESC, seq) WHERE state = 'queued';
-- Never written: what they were meant for is in `staged` and `receipts`.
ALTER TABLE tasks DROP COLUMN staged_rev, DROP COLUMN last_receipt;
-- A task's handles and its upstreams are read with it, by its id.
CREATE INDEX handles_task ON handles (task_id);
CREATE INDEX task_deps_downstream ON task_deps (downstream);
