/**
 * Bytes at rest per idempotency record, on each store: a state handle takes 100 keyed
 * `basket_add` calls (each with its own key, `maxPerState: 1000` so every record stays), and the
 * handle's record is measured before and after — by Redis itself (`MEMORY USAGE` of its hash), by
 * PostgreSQL (`pg_column_size` of its row's data), and for the memory store as the JSON it keeps.
 * The difference over 100 is one record (its digest name, arguments hash, time and the result of a
 * small call: `{"content":[{"type":"text","text":"N items"}],"structuredContent":{"count":N}}`).
 *
 *   npx tsx bench/idempotency-bytes.ts      (needs redis-server on PATH and PostgreSQL on 5432)
 */
import Fastify from 'fastify'
import { Redis } from 'ioredis'
import pg from 'pg'
import mcp, { injectClient, MemorySessionStore, PgSessionStore, RedisSessionStore, type SessionStore } from '../lib/index.js'
import { registerBasketTools } from '../examples/demo-tools.js'
import { createBenchDatabase } from './postgres.js'
import { startRedisServer } from '../test/helpers/redis-server.js'

const CALLS = 100
const teardowns: Array<() => unknown> = []
const t = { teardown: (fn: () => unknown) => { teardowns.push(fn) } }

async function measure (name: string, store: SessionStore, size: (key: string) => Promise<number>): Promise<void> {
  const app = Fastify()
  await app.register(mcp, { requestState: { secret: 'bytes-bench-secret' }, sessions: { store }, idempotency: { maxPerState: 1000 } })
  registerBasketTools(app.mcp)
  await app.ready()
  const c = injectClient(app, { protocolVersion: '2026-07-28' })
  const basket = (await c.callTool('basket_create')).structuredContent?.basket as string
  await c.callTool('basket_add', { basket, item: 'x' })
  const key = `~basket~${basket}`
  const before = await size(key)
  for (let i = 0; i < CALLS; i++) await c.callTool('basket_add', { basket, item: 'x' }, { idempotencyKey: `key-${i}-${'k'.repeat(20)}` })
  const after = await size(key)
  // The items grew by one short string per call too ('"x",' in the JSON): taken out.
  console.log(`| ${name} | ${Math.round((after - before) / CALLS) - 4} |`)
  await app.close()
}

console.log('| store | bytes per record |\n|---|---|')
const memory = new MemorySessionStore()
await measure('memory (JSON it keeps)', memory, async (key) => Buffer.byteLength(JSON.stringify((await memory.load(key))?.data ?? {})))

const server = await startRedisServer(t)
const redis = new Redis(server.url)
await measure('Redis (MEMORY USAGE)', new RedisSessionStore({ redis }), async (key) => Number(await redis.memory('USAGE', `mcp:{${key}}:s`, 'SAMPLES', '0')))
redis.disconnect()

const db = await createBenchDatabase()
const pool = new pg.Pool({ connectionString: db.url })
await measure('PostgreSQL (pg_column_size of the row)', new PgSessionStore({ pool }), async (key) =>
  Number((await pool.query('SELECT pg_column_size(t.*) AS n FROM mcp_state t WHERE id = $1', [key])).rows[0]?.n ?? 0))
await pool.end()
for (const fn of teardowns.reverse()) await fn()
await db.drop()
