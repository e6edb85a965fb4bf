-- The queue's tables: queues, tasks and their edges, worker handles,
-- staged parts, receipts, events, keys, shared secrets and the
-- maintenance leader's lease row.
CREATE TABLE queues (
  name text PRIMARY KEY,
  server boolean NOT NULL,
  config jsonb NOT NULL
);

CREATE TABLE tasks (
  id bigint PRIMARY KEY,
  namespace text NOT NULL,
  queue text NOT NULL REFERENCES queues (name),
  kind text NOT NULL,
  effect_class text NOT NULL,
  visibility text NOT NULL,
  producer_surface text,
  allowed_surfaces text[] NOT NULL DEFAULT '{}',
  requester text NOT NULL,
  priority integer NOT NULL DEFAULT 0,
  state text NOT NULL,
  not_before timestamptz,
  reason text,
  park jsonb,
  attempt integer NOT NULL DEFAULT 0,
  max_attempts integer,
  lease_ttl_s integer,
  lease_id text,
  lease_holder text,
  lease_expires timestamptz,
  claimed_at timestamptz,
  blocked integer NOT NULL DEFAULT 0,
  parent bigint REFERENCES tasks (id),
  depth integer NOT NULL DEFAULT 0,
  open_children integer NOT NULL DEFAULT 0,
  idempotency_key text,
  fingerprint bytea,
  source_pack text,
  staged_rev integer NOT NULL DEFAULT 0,
  last_receipt bytea,
  -- The spec as Tessera wrote it (json keeps its bytes; jsonb would not).
  spec json NOT NULL,
  children bigint[] NOT NULL DEFAULT '{}',
  dropped bytea[] NOT NULL DEFAULT '{}',
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);

CREATE INDEX tasks_ready ON tasks (queue, priority DESC, id) WHERE state = 'queued';
CREATE INDEX tasks_leases ON tasks (lease_expires) WHERE state = 'claimed';
CREATE INDEX tasks_children ON tasks (parent) WHERE parent IS NOT NULL;
CREATE UNIQUE INDEX tasks_idempotency ON tasks (namespace, requester, idempotency_key)
  WHERE idempotency_key IS NOT NULL;

CREATE TABLE task_deps (
  upstream bigint NOT NULL REFERENCES tasks (id),
  downstream bigint NOT NULL REFERENCES tasks (id),
  PRIMARY KEY (upstream, downstream)
);

CREATE TABLE handles (
  handle text PRIMARY KEY,
  task_id bigint NOT NULL REFERENCES tasks (id),
  attempt integer NOT NULL
);

CREATE TABLE staged (
  task_id bigint NOT NULL REFERENCES tasks (id),
  attempt integer NOT NULL,
  name text NOT NULL,
  sha256 bytea NOT NULL,
  PRIMARY KEY (task_id, attempt, name)
);

CREATE TABLE receipts (
  task_id bigint NOT NULL REFERENCES tasks (id),
  attempt integer NOT NULL,
  lease_id text NOT NULL,
  request bytea NOT NULL,
  sha256 bytea NOT NULL,
  body bytea NOT NULL,
  PRIMARY KEY (task_id, attempt)
);

CREATE TABLE events (
  xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  id bigserial,
  task_id bigint,
  from_state text,
  to_state text,
  facts jsonb,
  at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (xid, id)
);

CREATE UNLOGGED TABLE leader (
  name text PRIMARY KEY,
  holder text NOT NULL,
  term bigint NOT NULL,
  expires_at timestamptz NOT NULL
);

CREATE TABLE keys (
  key_id text PRIMARY KEY,
  record jsonb NOT NULL,
  revoked_at timestamptz
);

CREATE TABLE secrets (
  name text PRIMARY KEY,
  value bytea NOT NULL
);

-- A resend is recognised by the task's latest receipt.
CREATE INDEX receipts_latest ON receipts (task_id, attempt DESC);

-- Microseconds since the epoch as a time (what Tessera's times are sent as).
CREATE FUNCTION micros(us bigint) RETURNS timestamptz
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN 'epoch'::timestamptz + us * interval '1 microsecond';

-- A time as microseconds since the epoch (what Tessera reads times as).
CREATE FUNCTION to_micros(t timestamptz) RETURNS bigint
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN (extract(epoch FROM t) * 1000000)::bigint;
