-- Every daemon streams every event (`GET /v1/events`): each row gets the
-- id its readers resume by on any daemon (random, so an id tells nothing
-- of how many events came before it) and the attempt it was made at.
ALTER TABLE events ADD COLUMN uid uuid NOT NULL DEFAULT gen_random_uuid();
ALTER TABLE events ADD COLUMN attempt integer;
CREATE INDEX events_uid ON events (uid);
CREATE INDEX events_at ON events (at);
