/**
 * The register options renamed by issue 46 (item 6) are refused at register time, each error
 * naming the new name (`lib/renamed-options.ts`): table-driven over the plugin's own table, and
 * written out by hand (the migration list below and literal cases), so that an empty or shrunken
 * table fails rather than passes. The CHANGELOG's "Breaking" lists every one of them.
 */
import t from 'tap'
import { readFileSync } from 'node:fs'
import { MemoryEventLog } from '../../lib/index.js'
import { RENAMED_OPTIONS } from '../../lib/renamed-options.js'
import { registerError } from '../helpers/handshake-app.js'

/** `{ a: { b: value } }` for the path `a.b`. */
function optionAt (path: string, value: unknown): Record<string, unknown> {
  return path.split('.').reduceRight<unknown>((inner, key) => ({ [key]: inner }), value) as Record<string, unknown>
}

/** The migration, written out: old name → new name. */
const MIGRATION: Record<string, string> = {
  drainTimeout: 'drainTimeoutMs',
  clientRequestTimeout: 'clientRequestTimeoutMs',
  keepAliveInterval: 'keepAliveIntervalMs',
  retryInterval: 'retryIntervalMs',
  'sessions.cancelGrace': 'sessions.cancelGraceMs',
  'sessions.unusedTtl': 'sessions.unusedTtlMs',
  'tasks.ttl': 'tasks.ttlMs',
  'tasks.pollInterval': 'tasks.pollIntervalMs',
  requestStateSecret: 'requestState.secret',
  requestStateTtl: 'requestState.ttlMs',
  maxListenStreams: 'listen.max',
  maxListenStreamsPerClient: 'listen.maxPerClient',
  redisPrefix: 'redis.prefix',
  postgresPrefix: 'postgres.prefix',
  eventLogOptions: 'eventLog',
  eventLog: 'eventLog.store',
  authenticate: 'auth.authenticate',
  requireAuth: 'auth.required',
  wwwAuthenticate: 'auth.wwwAuthenticate',
  'auth.jwt.clockToleranceSec': 'auth.jwt.clockToleranceMs'
}

/** What an old name held for the test (`eventLog` is refused only when it holds an EventLog). */
const SAMPLE: Record<string, unknown> = { eventLog: new MemoryEventLog() }

t.test('the table is the migration', async t => {
  t.same(Object.fromEntries(RENAMED_OPTIONS.map(r => [r.old, r.now])), MIGRATION)
  t.same(RENAMED_OPTIONS.filter(r => r.when !== undefined).map(r => r.old).sort(), Object.keys(SAMPLE).sort(), 'a sample for each name refused by its value')
})

t.test('each old name is refused at register time, the error naming the new one', async t => {
  t.equal(RENAMED_OPTIONS.length, Object.keys(MIGRATION).length)
  for (const r of RENAMED_OPTIONS) {
    const err = await registerError(optionAt(r.old, SAMPLE[r.old] ?? 1))
    t.equal(err?.code, 'FST_ERR_MCP_INVALID_OPTION', `${r.old}: refused`)
    t.match(err?.message, `Invalid option "${r.old}": was renamed: use ${r.now}`, `${r.old}: names ${r.now}`)
    t.match(err?.message, '(CHANGELOG "Breaking")', `${r.old}: points at the CHANGELOG`)
  }
})

t.test('written out: the messages as a user reads them', async t => {
  t.equal((await registerError({ drainTimeout: 5000 }))?.message, 'Invalid option "drainTimeout": was renamed: use drainTimeoutMs (CHANGELOG "Breaking")')
  t.equal((await registerError({ sessions: { cancelGrace: 0 } }))?.message,
    'Invalid option "sessions.cancelGrace": was renamed: use sessions.cancelGraceMs (CHANGELOG "Breaking")')
  t.equal((await registerError({ redis: 'redis://127.0.0.1:6379', redisPrefix: 'a:' }))?.message,
    'Invalid option "redisPrefix": was renamed: use redis.prefix (redis: { client, prefix }) (CHANGELOG "Breaking")')
  t.match((await registerError({ eventLog: new MemoryEventLog() }))?.message, /^Invalid option "eventLog": was renamed: use eventLog\.store /)
  t.match((await registerError({ auth: { resource: 'https://mcp.example.com/mcp', authorizationServers: ['https://as.example.com'], jwt: { jwksUri: 'https://as.example.com/jwks', clockToleranceSec: 5 } } }))?.message,
    /^Invalid option "auth\.jwt\.clockToleranceSec": was renamed: use auth\.jwt\.clockToleranceMs \(in milliseconds: 30 s is 30000\)/)
  const several = await registerError({ drainTimeout: 1, requireAuth: false, tasks: { ttl: 5000 }, pth: '/x' })
  t.equal(several?.code, 'FST_ERR_MCP_INVALID_OPTION')
  t.match(several?.message, /^Invalid option "drainTimeout", "tasks\.ttl", "requireAuth": were renamed: drainTimeout: use drainTimeoutMs; tasks\.ttl: use tasks\.ttlMs; requireAuth: use auth\.required /,
    'several at once: all named, before the unknown key')
  t.equal(await registerError({ drainTimeout: undefined }) === null, false, 'refused whatever it holds, as an unknown key is')
})

t.test('the new names pass', async t => {
  t.equal(await registerError({
    drainTimeoutMs: 1000,
    clientRequestTimeoutMs: 1000,
    keepAliveIntervalMs: 0,
    retryIntervalMs: 500,
    sessions: { cancelGraceMs: 0, unusedTtlMs: 1000 },
    tasks: { ttlMs: 5000, pollIntervalMs: 500 },
    requestState: { secret: 'a-secret-of-enough-length', ttlMs: 1000 },
    listen: { max: 10, maxPerClient: 2 },
    eventLog: { store: new MemoryEventLog(), maxEvents: 10, ttlMs: 1000 },
    auth: { authenticate: () => null, required: false, wwwAuthenticate: 'Bearer realm="x"' }
  }), null)
})

t.test('the CHANGELOG\'s "Breaking" lists every rename', async t => {
  const changelog = readFileSync(new URL('../../CHANGELOG.md', import.meta.url), 'utf8')
  const unreleased = changelog.slice(changelog.indexOf('## Unreleased'), changelog.indexOf('\n## ', changelog.indexOf('## Unreleased') + 1))
  const breaking = unreleased.slice(unreleased.indexOf('### Breaking'))
  for (const r of RENAMED_OPTIONS) t.match(breaking, `\`${r.old}\` → \`${r.now}\``, `${r.old} → ${r.now}`)
})
