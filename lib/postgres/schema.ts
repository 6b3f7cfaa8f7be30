/**
 * The tables and functions of the PostgreSQL backends, and the migration that makes them.
 *
 * - `<prefix>state`: sessions, state handles and task records. `data` is a jsonb object mapping
 *   each key to `[position, JSON text of its value]`: the text is a jsonb string, so any value
 *   JSON can carry is kept as it was written (NUL characters included, which jsonb itself
 *   refuses); the position keeps the keys in the order they were first set, as the other stores
 *   do (jsonb sorts an object's keys). `next_pos` is the next key's position. A save merges the
 *   changed keys into it (`||`) and removes the deleted ones (`-`), so it writes only those.
 *   `ttl_ms` is a record's own idle TTL (null: the store's), `expires_at` when it expires.
 * - `<prefix>leases`: the lock's lease rows (`id`, random `token`, `expires_at`).
 * - `<prefix>save(...)`: the fenced save, and with `p_release` the lease's release in the same
 *   call. It locks the state row first, then reads the lease: a taker locks the same row before
 *   it takes the lease (`<prefix>take_and_load`), so a save and a take on one key are serialized
 *   by that row lock, and each statement of these functions sees what committed before it.
 * - `<prefix>save_many(...)`: fenced saves of several records and their leases' releases in one
 *   call, all or none (a request's session and the state handles its calls changed).
 * - `<prefix>take_and_load(...)`: the lease and the record in one call (status 2: no record,
 *   nothing taken; 0: lease busy; 1: taken, with the record).
 * - `<prefix>load(...)`: a read without the lock (read-only snapshots, tasks): a plain read, and
 *   the idle TTL pushed at most once per `least(1 s, ttl / 10)` of a record's life, without
 *   waiting for the WAL flush — a read is not a write transaction, a dead tuple and a disk flush
 *   each (a refresh lost in a crash shortens the record's life by at most that interval).
 * - `<prefix>lease_take`, `<prefix>lease_extend`, `<prefix>lease_release`: the lock's own calls.
 *   These and `take_and_load` commit without waiting for the WAL flush (`synchronous_commit` off
 *   for their transaction only): a lease lost in a database crash cannot cause a lost update,
 *   since every save is fenced (a save by a holder whose lease row is gone writes only if nobody
 *   took the key and nobody wrote since its read). A save waits for the flush: what a client is
 *   told was kept is on disk.
 * - `<prefix>answers`: the bus's expected and kept answers; `<prefix>bus_messages`: bus messages
 *   too large for a NOTIFY payload (the notification then carries the row's id).
 * - `<prefix>streams` and `<prefix>events`: the event log (an append table with a cursor per
 *   stream); `<prefix>ended`: sessions whose late writes the log refuses.
 *
 * Every time is the database's clock (`clock_timestamp()`): one clock for every instance.
 */
import { quietErrors, type PgPoolLike } from './pool.js'

/** Default prefix of every table and function the plugin makes. */
export const DEFAULT_PG_PREFIX = 'mcp_'

/**
 * Validates a table-name prefix: a lower-case SQL identifier start (it is spliced into the SQL;
 * nothing else is), at most 40 characters so that every name stays within PostgreSQL's 63.
 * @throws {TypeError} for anything else.
 */
export function checkPgPrefix (prefix: unknown): string {
  if (typeof prefix !== 'string' || !/^[a-z_][a-z0-9_]{0,39}$/.test(prefix)) {
    throw new TypeError('prefix must be lower-case letters, digits and underscores (at most 40), not starting with a digit.')
  }
  return prefix
}

/** The statements that make (or update) the schema of `prefix`. Idempotent. */
export function schemaStatements (p: string): string[] {
  const expiresIn = (ms: string): string => `clock_timestamp() + (${ms})::float8 * interval '1 millisecond'`
  return [
    `CREATE TABLE IF NOT EXISTS ${p}state (
      id text PRIMARY KEY,
      data jsonb NOT NULL,
      next_pos bigint NOT NULL DEFAULT 0,
      version bigint NOT NULL DEFAULT 0,
      ttl_ms bigint,
      expires_at timestamptz NOT NULL
    )`,
    `CREATE INDEX IF NOT EXISTS ${p}state_expires ON ${p}state (expires_at)`,
    `CREATE TABLE IF NOT EXISTS ${p}leases (
      id text PRIMARY KEY,
      token text NOT NULL,
      expires_at timestamptz NOT NULL
    )`,
    `CREATE INDEX IF NOT EXISTS ${p}leases_expires ON ${p}leases (expires_at)`,
    `CREATE TABLE IF NOT EXISTS ${p}answers (
      sid text NOT NULL,
      key text NOT NULL,
      tag text,
      value text,
      expires_at timestamptz NOT NULL,
      PRIMARY KEY (sid, key)
    )`,
    `CREATE INDEX IF NOT EXISTS ${p}answers_expires ON ${p}answers (expires_at)`,
    `CREATE TABLE IF NOT EXISTS ${p}bus_messages (
      id bigserial PRIMARY KEY,
      body text NOT NULL,
      at timestamptz NOT NULL DEFAULT clock_timestamp()
    )`,
    `CREATE INDEX IF NOT EXISTS ${p}bus_messages_at ON ${p}bus_messages (at)`,
    `CREATE TABLE IF NOT EXISTS ${p}streams (
      id text PRIMARY KEY,
      session text NOT NULL,
      seq bigint NOT NULL,
      finished boolean NOT NULL DEFAULT false,
      expires_at timestamptz NOT NULL
    )`,
    `CREATE INDEX IF NOT EXISTS ${p}streams_session ON ${p}streams (session)`,
    `CREATE INDEX IF NOT EXISTS ${p}streams_expires ON ${p}streams (expires_at)`,
    `CREATE TABLE IF NOT EXISTS ${p}events (
      stream text NOT NULL REFERENCES ${p}streams (id) ON DELETE CASCADE,
      seq bigint NOT NULL,
      kind "char" NOT NULL,
      data text NOT NULL,
      PRIMARY KEY (stream, seq)
    )`,
    `CREATE TABLE IF NOT EXISTS ${p}ended (
      session text PRIMARY KEY,
      until timestamptz NOT NULL
    )`,
    `CREATE TABLE IF NOT EXISTS ${p}buckets (
      key text PRIMARY KEY,
      tat float8 NOT NULL,
      expires_at timestamptz NOT NULL
    )`,
    `CREATE INDEX IF NOT EXISTS ${p}buckets_expires ON ${p}buckets (expires_at)`,
    `CREATE TABLE IF NOT EXISTS ${p}slots (
      key text NOT NULL,
      holder text NOT NULL,
      expires_at timestamptz NOT NULL,
      PRIMARY KEY (key, holder)
    )`,
    `CREATE INDEX IF NOT EXISTS ${p}slots_expires ON ${p}slots (expires_at)`,
    `CREATE OR REPLACE FUNCTION ${p}limit_acquire(
      p_key text, p_interval float8, p_burst float8, p_cap int, p_lease_ms bigint, p_call text,
      OUT ok boolean, OUT kind text, OUT retry_ms bigint
    ) LANGUAGE plpgsql AS $fn$
    DECLARE
      now_us float8;
      tat float8;
      wait float8 := 0;
      busy boolean := false;
      first_end float8;
    BEGIN
      -- One check of a key at a time (a transaction-level lock: released at commit, and safe
      -- behind a pooler in transaction mode); each statement below sees what committed before.
      PERFORM pg_advisory_xact_lock(hashtextextended('${p}limit:' || p_key, 0));
      now_us := extract(epoch from clock_timestamp()) * 1000000;
      -- A few rows that ran out go with each check: a flood of callers leaves nothing for long.
      DELETE FROM ${p}buckets WHERE key IN (
        SELECT key FROM ${p}buckets WHERE expires_at <= clock_timestamp() LIMIT 20 FOR UPDATE SKIP LOCKED);
      DELETE FROM ${p}slots WHERE (key, holder) IN (
        SELECT key, holder FROM ${p}slots WHERE expires_at <= clock_timestamp() LIMIT 20 FOR UPDATE SKIP LOCKED);
      tat := now_us;
      IF p_interval > 0 THEN
        SELECT greatest(b.tat, now_us) INTO tat FROM ${p}buckets b WHERE b.key = p_key;
        IF NOT FOUND THEN tat := now_us; END IF;
        wait := tat + p_interval - now_us - p_interval * p_burst;
      END IF;
      IF p_cap > 0 THEN
        DELETE FROM ${p}slots WHERE key = p_key AND expires_at <= clock_timestamp();
        busy := (SELECT count(*) FROM ${p}slots WHERE key = p_key) >= p_cap;
      END IF;
      IF wait > 0 THEN
        ok := false; kind := 'rate'; retry_ms := ceil(wait / 1000);
        RETURN;
      END IF;
      IF busy THEN
        SELECT min(extract(epoch from expires_at) * 1000000) INTO first_end FROM ${p}slots WHERE key = p_key;
        ok := false; kind := 'concurrency'; retry_ms := ceil((first_end - now_us) / 1000);
        RETURN;
      END IF;
      IF p_interval > 0 THEN
        tat := tat + p_interval;
        INSERT INTO ${p}buckets AS b (key, tat, expires_at)
          VALUES (p_key, tat, to_timestamp(tat / 1000000))
          ON CONFLICT (key) DO UPDATE SET tat = excluded.tat, expires_at = excluded.expires_at;
      END IF;
      IF p_cap > 0 THEN
        INSERT INTO ${p}slots (key, holder, expires_at) VALUES (p_key, p_call, ${expiresIn('p_lease_ms')})
          ON CONFLICT (key, holder) DO UPDATE SET expires_at = excluded.expires_at;
      END IF;
      ok := true;
    END $fn$`,
    `CREATE OR REPLACE FUNCTION ${p}save(
      p_id text, p_lock text, p_token text, p_version bigint, p_ttl bigint,
      p_keys text[], p_values text[], p_delete text[], p_release boolean
    ) RETURNS text LANGUAGE plpgsql AS $fn$
    DECLARE
      cur_version bigint;
      holder text;
      result text := 'ok';
    BEGIN
      -- The row first: a taker of the lease locks it before taking (see take_and_load).
      SELECT version INTO cur_version FROM ${p}state
        WHERE id = p_id AND expires_at > clock_timestamp() FOR UPDATE;
      IF NOT FOUND THEN
        result := 'gone';
      ELSE
        IF p_token IS NOT NULL THEN
          SELECT token INTO holder FROM ${p}leases WHERE id = p_lock AND expires_at > clock_timestamp();
        END IF;
        IF p_token IS NOT NULL AND holder IS DISTINCT FROM p_token
          AND (holder IS NOT NULL OR p_version IS NULL OR cur_version <> p_version) THEN
          -- the lease is not ours: write only if nobody holds it and nobody wrote since our read
          result := 'fenced';
        ELSE
          UPDATE ${p}state s SET data = (s.data || ${positioned('s.data', 's.next_pos', 'p_keys', 'p_values')}) - p_delete,
            next_pos = s.next_pos + cardinality(p_keys), version = s.version + 1,
            expires_at = ${expiresIn('coalesce(s.ttl_ms, p_ttl)')}
            WHERE s.id = p_id;
        END IF;
      END IF;
      IF p_release THEN
        DELETE FROM ${p}leases WHERE id = p_lock AND token = p_token;
      END IF;
      RETURN result;
    END $fn$`,
    // Several records at once, all or none (see save for each record's check): the rows are locked
    // in one order first (two writers of the same records cannot deadlock), every record is
    // checked, and only when every one may be written are they all written. Every lease is
    // released. Returns each record's result: all 'ok', or the failures and 'skipped'.
    `CREATE OR REPLACE FUNCTION ${p}save_many(p_items jsonb, p_ttl bigint) RETURNS text[] LANGUAGE plpgsql AS $fn$
    DECLARE
      n int := jsonb_array_length(p_items);
      results text[] := array_fill(''::text, ARRAY[n]);
      item jsonb;
      cur_version bigint;
      holder text;
      failed boolean := false;
      v_keys text[];
      v_values text[];
    BEGIN
      PERFORM 1 FROM ${p}state WHERE id IN (SELECT e ->> 'id' FROM jsonb_array_elements(p_items) AS e)
        ORDER BY id FOR UPDATE;
      FOR i IN 1..n LOOP
        item := p_items -> (i - 1);
        SELECT version INTO cur_version FROM ${p}state WHERE id = item ->> 'id' AND expires_at > clock_timestamp();
        IF NOT FOUND THEN
          results[i] := 'gone';
          failed := true;
        ELSE
          SELECT token INTO holder FROM ${p}leases WHERE id = item ->> 'lock' AND expires_at > clock_timestamp();
          IF holder IS DISTINCT FROM item ->> 'token'
            AND (holder IS NOT NULL OR item ->> 'version' IS NULL OR cur_version <> (item ->> 'version')::bigint) THEN
            results[i] := 'fenced';
            failed := true;
          ELSE
            results[i] := 'ok';
          END IF;
        END IF;
      END LOOP;
      FOR i IN 1..n LOOP
        item := p_items -> (i - 1);
        IF failed THEN
          IF results[i] = 'ok' THEN results[i] := 'skipped'; END IF;
        ELSE
          v_keys := ARRAY(SELECT jsonb_array_elements_text(item -> 'keys'));
          v_values := ARRAY(SELECT jsonb_array_elements_text(item -> 'values'));
          UPDATE ${p}state s SET data = (s.data || ${positioned('s.data', 's.next_pos', 'v_keys', 'v_values')})
              - ARRAY(SELECT jsonb_array_elements_text(item -> 'delete')),
            next_pos = s.next_pos + cardinality(v_keys), version = s.version + 1,
            expires_at = ${expiresIn('coalesce(s.ttl_ms, p_ttl)')}
            WHERE s.id = item ->> 'id';
        END IF;
        DELETE FROM ${p}leases WHERE id = item ->> 'lock' AND token = item ->> 'token';
      END LOOP;
      RETURN results;
    END $fn$`,
    `CREATE OR REPLACE FUNCTION ${p}event_write(
      p_session text, p_stream text, p_kind "char", p_data text, p_max bigint, p_ttl bigint, p_guard_state boolean
    ) RETURNS bigint LANGUAGE plpgsql AS $fn$
    DECLARE
      next_seq bigint;
      v_until timestamptz := ${expiresIn('p_ttl')};
    BEGIN
      -- An ended session writes nothing: its record must live (the store on this database and
      -- prefix), or, without that, it must carry no end mark.
      IF p_guard_state THEN
        PERFORM 1 FROM ${p}state WHERE id = p_session AND expires_at > clock_timestamp();
        IF NOT FOUND THEN RETURN NULL; END IF;
      ELSE
        PERFORM 1 FROM ${p}ended WHERE session = p_session AND until > clock_timestamp();
        IF FOUND THEN RETURN NULL; END IF;
      END IF;
      IF p_kind = 's' THEN
        -- A few streams that ran out go with each stream opened: the table stays bounded by age.
        DELETE FROM ${p}streams WHERE id IN (
          SELECT id FROM ${p}streams WHERE expires_at <= clock_timestamp() LIMIT 20 FOR UPDATE SKIP LOCKED);
        DELETE FROM ${p}ended WHERE session IN (
          SELECT session FROM ${p}ended WHERE until <= clock_timestamp() LIMIT 20 FOR UPDATE SKIP LOCKED);
      END IF;
      DELETE FROM ${p}streams WHERE id = p_stream AND expires_at <= clock_timestamp();
      INSERT INTO ${p}streams AS st (id, session, seq, expires_at) VALUES (p_stream, p_session, 1, v_until)
        ON CONFLICT (id) DO UPDATE SET seq = st.seq + 1, expires_at = excluded.expires_at
        WHERE st.session = p_session
        RETURNING seq INTO next_seq;
      IF next_seq IS NULL THEN RETURN NULL; END IF; -- another session's stream id
      INSERT INTO ${p}events (stream, seq, kind, data) VALUES (p_stream, next_seq, p_kind, p_data);
      DELETE FROM ${p}events WHERE stream = p_stream AND seq <= next_seq - p_max;
      RETURN next_seq;
    END $fn$`,
    `CREATE OR REPLACE FUNCTION ${p}lease_take(p_id text, p_token text, p_ttl bigint) RETURNS boolean
    LANGUAGE plpgsql AS $fn$
    BEGIN
      PERFORM set_config('synchronous_commit', 'off', true);
      INSERT INTO ${p}leases AS l (id, token, expires_at) VALUES (p_id, p_token, ${expiresIn('p_ttl')})
        ON CONFLICT (id) DO UPDATE SET token = excluded.token, expires_at = excluded.expires_at
        WHERE l.expires_at <= clock_timestamp();
      RETURN FOUND;
    END $fn$`,
    `CREATE OR REPLACE FUNCTION ${p}lease_extend(p_id text, p_token text, p_ttl bigint) RETURNS boolean
    LANGUAGE plpgsql AS $fn$
    BEGIN
      PERFORM set_config('synchronous_commit', 'off', true);
      UPDATE ${p}leases SET expires_at = ${expiresIn('p_ttl')}
        WHERE id = p_id AND token = p_token AND expires_at > clock_timestamp();
      RETURN FOUND;
    END $fn$`,
    `CREATE OR REPLACE FUNCTION ${p}lease_release(p_id text, p_token text) RETURNS void
    LANGUAGE plpgsql AS $fn$
    BEGIN
      PERFORM set_config('synchronous_commit', 'off', true);
      DELETE FROM ${p}leases WHERE id = p_id AND token = p_token;
    END $fn$`,
    `CREATE OR REPLACE FUNCTION ${p}load(p_id text, p_ttl bigint, OUT data jsonb, OUT version bigint)
    LANGUAGE plpgsql AS $fn$
    DECLARE
      v_ttl bigint;
      v_expires timestamptz;
    BEGIN
      SELECT s.data, s.version, coalesce(s.ttl_ms, p_ttl), s.expires_at INTO data, version, v_ttl, v_expires
        FROM ${p}state s WHERE s.id = p_id AND s.expires_at > clock_timestamp();
      IF NOT FOUND THEN RETURN; END IF;
      -- Refreshed less than an interval ago: nothing to write. (A record read first after its
      -- creation with a shorter unusedTtl is always refreshed: its ttl applies from then on.)
      IF v_expires >= ${expiresIn('v_ttl - least(1000, v_ttl / 10)')} THEN RETURN; END IF;
      PERFORM set_config('synchronous_commit', 'off', true);
      -- Readers racing here write once: one that waited for the row finds it refreshed.
      UPDATE ${p}state SET expires_at = ${expiresIn('v_ttl')}
        WHERE id = p_id AND expires_at > clock_timestamp() AND expires_at < ${expiresIn('v_ttl - least(1000, v_ttl / 10)')};
    END $fn$`,
    `CREATE OR REPLACE FUNCTION ${p}take_and_load(
      p_lock text, p_id text, p_token text, p_lock_ttl bigint, p_ttl bigint,
      OUT status int, OUT data jsonb, OUT version bigint
    ) LANGUAGE plpgsql AS $fn$
    BEGIN
      PERFORM set_config('synchronous_commit', 'off', true);
      -- The row first (see save), refreshing its idle TTL.
      UPDATE ${p}state s SET expires_at = ${expiresIn('coalesce(s.ttl_ms, p_ttl)')}
        WHERE s.id = p_id AND s.expires_at > clock_timestamp()
        RETURNING s.data, s.version INTO data, version;
      IF NOT FOUND THEN
        status := 2;
        RETURN;
      END IF;
      INSERT INTO ${p}leases AS l (id, token, expires_at) VALUES (p_lock, p_token, ${expiresIn('p_lock_ttl')})
        ON CONFLICT (id) DO UPDATE SET token = excluded.token, expires_at = excluded.expires_at
        WHERE l.expires_at <= clock_timestamp();
      IF FOUND THEN
        status := 1;
      ELSE
        -- Busy: nothing taken (the refresh above stands: the record is in use).
        status := 0; data := NULL; version := NULL;
      END IF;
    END $fn$`
  ]
}

/**
 * SQL: the keys and values set (arrays, in the caller's order) as a jsonb object of
 * `[position, text]`, a key already in `data` keeping its position, a new one numbered on from
 * `next`.
 */
export function positioned (data: string, next: string, keys: string, values: string): string {
  return `coalesce((SELECT jsonb_object_agg(e.k, jsonb_build_array(coalesce((${data} -> e.k ->> 0)::bigint, ${next} + e.n), e.v))
    FROM unnest(${keys}, ${values}) WITH ORDINALITY AS e(k, v, n)), '{}'::jsonb)`
}

/** Schemas made (or being made) by this process, by pool and prefix. */
const made = new WeakMap<PgPoolLike, Map<string, Promise<void>>>()

/**
 * Makes the tables and functions of `prefix` (default `'mcp_'`) on `pool` if they are missing, in
 * one transaction under an advisory lock (instances starting together do not trip over each
 * other). Safe to run on every start; the backends run it on first use, so calling it is only
 * needed where the app's database user may not create tables at run time (run it from a
 * migration step with a user that may).
 */
export async function migratePostgres (pool: PgPoolLike, options: { prefix?: string } = {}): Promise<void> {
  const prefix = checkPgPrefix(options.prefix ?? DEFAULT_PG_PREFIX)
  const client = await pool.connect()
  const listening = quietErrors(client)
  let failed: unknown
  try {
    await client.query('BEGIN')
    await client.query("SELECT pg_advisory_xact_lock(hashtextextended('fastify-mcp-http schema', 0))")
    for (const statement of schemaStatements(prefix)) await client.query(statement)
    await client.query('COMMIT')
  } catch (err) {
    failed = err
    await client.query('ROLLBACK').catch(() => {})
    throw err
  } finally {
    listening()
    client.release(failed !== undefined)
  }
}

/**
 * Resolves once the schema of `prefix` exists on `pool`, making it on the first call of this
 * process (a failed attempt is tried again by the next call).
 */
export function ensureSchema (pool: PgPoolLike, prefix: string): Promise<void> {
  let byPrefix = made.get(pool)
  if (byPrefix === undefined) made.set(pool, byPrefix = new Map())
  let ready = byPrefix.get(prefix)
  if (ready === undefined) {
    ready = migratePostgres(pool, { prefix })
    ready.catch(() => { byPrefix.delete(prefix) })
    byPrefix.set(prefix, ready)
  }
  return ready
}
