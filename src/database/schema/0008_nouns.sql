-- Nouns shared by several daemons (`serve --objects-url`): the bodies are
-- objects in the bucket, and the version lists are here. Each noun has a
-- head row (its latest version; a change locks it, as the key's lock on a
-- root) and a row per version holding the entry its ref file would list.
-- Names sort as bytes (COLLATE "C"), as a root's listing sorts them.
CREATE TABLE nouns (
  namespace text COLLATE "C" NOT NULL,
  store text COLLATE "C" NOT NULL,
  key text COLLATE "C" NOT NULL,
  latest bigint NOT NULL,
  PRIMARY KEY (namespace, store, key)
);
CREATE TABLE noun_versions (
  namespace text COLLATE "C" NOT NULL,
  store text COLLATE "C" NOT NULL,
  key text COLLATE "C" NOT NULL,
  version bigint NOT NULL,
  sha256 bytea NOT NULL,
  entry jsonb NOT NULL,
  PRIMARY KEY (namespace, store, key, version)
);
-- Whether any version names an object (the garbage collector's question).
CREATE INDEX noun_versions_sha256 ON noun_versions (sha256);
-- A receipt read by its hash on a daemon that lacks its object (any
-- daemon serves a task's output and its consumers, whoever completed it).
CREATE INDEX receipts_sha256 ON receipts (sha256);
-- Every object written to the bucket, and when a write last counted on it
-- (a put that found it there counts too), counted before the bucket's
-- PUT. The garbage collector deletes an object only under its row's lock
-- and only when no write counted on it for its grace period: a count on
-- an old object the collector is deleting waits for it, and the PUT after
-- writes the object anew.
CREATE TABLE objects (
  sha256 bytea PRIMARY KEY,
  touched timestamptz NOT NULL
);
CREATE INDEX objects_touched ON objects (touched);
