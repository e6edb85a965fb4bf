-- An event's id for readers (`Last-Event-ID`) is its place in the stream,
-- (xid, id), enciphered by the daemon with a key every daemon shares (the
-- `event_ids` secret): it still tells nothing of the events before it,
-- and no longer costs each event row a random uuid and an index entry
-- (two thirds of the row's insert). An id a reader kept from before this
-- migration resumes as one too old does: from the oldest event kept.
DROP INDEX events_uid;
ALTER TABLE events DROP COLUMN uid;
