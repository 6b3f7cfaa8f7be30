/**
 * The hot statements' query (`lib/postgres/text-query.ts`): the same parameters and rows as pg's
 * own query, a prepared statement shared with pg's bookkeeping on one connection, server errors
 * as pg's `DatabaseError`, and pg's own query (same result shape) on a client in pipeline mode.
 */
import t from 'tap'
import { pgText, pgTextOn } from '../../lib/postgres/text-query.js'
import type { PgPoolLike } from '../../lib/postgres/pool.js'
import { createTestDatabase } from '../helpers/postgres.js'

const ECHO = { name: 'tq_echo', text: 'SELECT $1::text[] AS a, $2::text AS s, $3::bigint AS n, $4::boolean AS b, NULL::text AS z' }
const tricky = ['plain', 'a "quoted" word', 'back\\slash', '', 'NULL', null, '{"json": [1, "x\\"y"]}', 'ünïcødé ✓', 'comma, and } brace']

t.test('parameters and rows are the text pg itself sends and reads', async t => {
  const db = await createTestDatabase(t)
  const pool = db.pool({ max: 1 }) as unknown as PgPoolLike
  const ours = await pgText(pool, ECHO, [tricky, 'x', 42, true])
  const theirs = await db.admin.query({ text: ECHO.text, values: [tricky, 'x', 42, true], rowMode: 'array', types: { getTypeParser: () => (v: string) => v } })
  t.same(ours.rows, theirs.rows, 'the same rows as pg sends and reads them')
  t.equal(ours.rows[0][4], null, 'SQL NULL is null')
  t.equal(ours.rowCount, 1)
  // The array went through the server and back unchanged.
  const round = await db.admin.query('SELECT $1::text[] AS a', [tricky])
  const parsed = await pgText(pool, { name: 'tq_array', text: 'SELECT array_to_json($1::text[])::text' }, [tricky])
  t.same(JSON.parse(parsed.rows[0][0] as string), round.rows[0].a, 'every element intact')
})

t.test("a statement prepared by pg's own query is not prepared again, nor the other way round", async t => {
  const db = await createTestDatabase(t)
  const pool = db.pool({ max: 1 })
  const one = { name: 'tq_one', text: 'SELECT $1::int + 1 AS n' }
  await pool.query({ ...one, values: [1] })
  t.same((await pgText(pool as unknown as PgPoolLike, one, [1])).rows, [['2']])
  const two = { name: 'tq_two', text: 'SELECT $1::int + 2 AS n' }
  t.same((await pgText(pool as unknown as PgPoolLike, two, [1])).rows, [['3']])
  t.same((await pool.query({ ...two, values: [1] })).rows, [{ n: 3 }], "pg's query reuses it")
  await t.rejects(pgText(pool as unknown as PgPoolLike, { name: 'tq_two', text: 'SELECT 0' }, []), /Prepared statements must be unique/)
})

t.test("a server error is pg's DatabaseError, and the connection goes on", async t => {
  const db = await createTestDatabase(t)
  const pool = db.pool({ max: 1 }) as unknown as PgPoolLike
  const err = await pgText(pool, { name: 'tq_fail', text: 'SELECT 1 / $1::int' }, [0]).catch((e: unknown) => e) as { code?: string, severity?: string }
  t.equal(err.code, '22012', 'division_by_zero')
  t.equal(typeof err.severity, 'string')
  t.same((await pgText(pool, { name: 'tq_fail', text: 'SELECT 1 / $1::int' }, [1])).rows, [['1']], 'the same statement then runs')
  const client = await (pool as unknown as import('pg').Pool).connect()
  t.teardown(() => { client.release() })
  t.same((await pgTextOn(pool, client, { name: 'tq_on', text: 'SELECT $1::text' }, ['on a client'])).rows, [['on a client']])
  await t.rejects(pgTextOn(pool, client, { name: 'tq_on_fail', text: 'SELECT 1 / 0' }, []), { code: '22012' })
})

t.test("a pool in pipeline mode runs pg's own query, with the same rows", async t => {
  const db = await createTestDatabase(t)
  const pool = db.pool({ max: 1, pipeline: true } as never) as unknown as PgPoolLike
  const ours = await pgText(pool, ECHO, [tricky, 'x', 42, true])
  const plain = await pgText(db.pool({ max: 1 }) as unknown as PgPoolLike, ECHO, [tricky, 'x', 42, true])
  t.same(ours.rows, plain.rows)
})
