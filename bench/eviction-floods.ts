/**
 * What a flood can push out of a full memory store (docs/abuse-bounds.md's figures): the plugin
 * with the demo tools on a `MemorySessionStore({ max })`, driven with `app.inject`. A victim holds
 * a session with a counter and a basket with an item (records holding state), made first and idle
 * since; floods of each kind then come from the victim's own address or from other addresses, and
 * each row says whether the victim's records are still there.
 *
 *   npx tsx bench/eviction-floods.ts [--max 1000]
 *
 * Floods: `empty` (initialize + ping: a session holding nothing), `state` (initialize +
 * counter_add: a session holding state). The victim also keeps a session holding nothing, idle
 * (`victimEmpty`): that one goes with the first records holding nothing of its client.
 */
import { parseArgs } from 'node:util'
import Fastify, { type FastifyInstance } from 'fastify'
import mcp, { MemorySessionStore } from '../lib/index.js'
import { registerDemoTools } from '../examples/demo-tools.js'
import { headers, initializeBody, modernHeaders, newId, rpc, type Session } from '../test/helpers/wire.js'

const { values: args } = parseArgs({ options: { max: { type: 'string', default: '1000' } } })
const MAX = Number(args.max)
const VICTIM = '198.51.100.7'

async function post (app: FastifyInstance, ip: string, body: Record<string, unknown>, h: Record<string, string>):
Promise<{ status: number, json: Record<string, any>, headers: Record<string, unknown> }> {
  const res = await app.inject({ method: 'POST', url: '/mcp', remoteAddress: ip, headers: h, payload: body })
  return { status: res.statusCode, json: res.body === '' ? {} : res.json(), headers: res.headers }
}

async function open (app: FastifyInstance, ip: string): Promise<Session> {
  const res = await post(app, ip, initializeBody(), headers())
  const s = { sid: res.headers['mcp-session-id'] as string, version: res.json.result.protocolVersion as string }
  await post(app, ip, { jsonrpc: '2.0', method: 'notifications/initialized' }, headers(s))
  return s
}

async function call (app: FastifyInstance, ip: string, s: Session, name: string, a: Record<string, unknown> = {}): Promise<Record<string, any>> {
  return (await post(app, ip, { jsonrpc: '2.0', id: newId(), method: 'tools/call', params: { name, arguments: a } }, headers(s))).json
}

async function modern (app: FastifyInstance, ip: string, name: string, a: Record<string, unknown>): Promise<Record<string, any>> {
  const body = rpc('tools/call', { name, arguments: a })
  return (await post(app, ip, body, modernHeaders(body))).json
}

interface Row { flood: string, from: string, records: number, victimSession: boolean, victimBasket: boolean, victimEmpty: boolean, ms: number }

async function run (flood: 'empty' | 'state', addresses: number, perAddress: number, sameAddress: boolean): Promise<Row> {
  const app = Fastify({ logger: false })
  const store = new MemorySessionStore({ max: MAX, sweepInterval: 0 })
  await app.register(mcp, { sessions: { store, gcProbability: 0 }, requestState: { secret: 'eviction-floods-secret-0123456789' } })
  registerDemoTools(app.mcp)
  await app.ready()
  try {
    const session = await open(app, VICTIM)
    await call(app, VICTIM, session, 'counter_add', { by: 42 })
    const basket = (await modern(app, VICTIM, 'basket_create', {})).result.structuredContent.basket as string
    await modern(app, VICTIM, 'basket_add', { basket, item: 'tea' })
    const empty = await open(app, VICTIM)
    await post(app, VICTIM, { jsonrpc: '2.0', id: newId(), method: 'ping' }, headers(empty))
    const started = performance.now()
    for (let a = 0; a < addresses; a++) {
      const ip = sameAddress ? VICTIM : `10.${(a >> 16) & 255}.${(a >> 8) & 255}.${a & 255}`
      for (let i = 0; i < perAddress; i++) {
        const s = await open(app, ip)
        if (flood === 'empty') await post(app, ip, { jsonrpc: '2.0', id: newId(), method: 'ping' }, headers(s))
        else await call(app, ip, s, 'counter_add', { by: 1 })
      }
    }
    const ms = Math.round(performance.now() - started)
    const counter = await call(app, VICTIM, session, 'counter_get')
    const items = await modern(app, VICTIM, 'basket_get', { basket })
    return {
      flood,
      from: sameAddress ? 'the victim\'s address' : `${addresses} addresses × ${perAddress}`,
      records: addresses * perAddress,
      victimSession: counter.result?.structuredContent?.counter === 42,
      victimBasket: JSON.stringify(items.result?.structuredContent?.items) === '["tea"]',
      victimEmpty: await store.exists(empty.sid),
      ms
    }
  } finally {
    await app.close()
  }
}

async function main (): Promise<void> {
  const rows: Row[] = []
  rows.push(await run('empty', 1, 10 * MAX, true))
  rows.push(await run('empty', 1, 10 * MAX, false))
  rows.push(await run('empty', Math.round(MAX * 1.1), 1, false))
  rows.push(await run('empty', 2 * MAX, 1, false))
  rows.push(await run('state', 1, 2 * MAX, true))
  rows.push(await run('state', 1, 2 * MAX, false))
  rows.push(await run('state', MAX / 10, 20, false))
  rows.push(await run('state', Math.round(MAX * 0.9), 2, false))
  rows.push(await run('state', Math.round(MAX * 1.1), 1, false))
  console.log(JSON.stringify({ max: MAX, rows }, null, 1))
}

main().then(() => process.exit(0), (err: unknown) => { console.error(err); process.exit(1) })
