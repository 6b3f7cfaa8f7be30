/**
 * State handles (lib/state/handles.ts) on the memory and file stores: minted ids, the principal
 * binding, the same `null` for unknown, expired, ended, foreign and malformed handles (and nothing
 * created in the store or the lock directory for them), ending, reading out of band, the kind's TTL.
 */
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { FileSessionLock } from '../../lib/locks/file-lock.js'
import { MemorySessionLock } from '../../lib/locks/memory-lock.js'
import { FileSessionStore } from '../../lib/sessions/file-store.js'
import { MemorySessionStore } from '../../lib/sessions/memory-store.js'
import { HANDLE_KEYS, StateHandles, handleKey, type HandlePrincipal } from '../../lib/state/handles.js'
import { StateBackend, type StateScope } from '../../lib/state/state-scope.js'
import { sleep } from '../helpers/time.js'
import { pairingFor } from '../../lib/state/pairings/choose-pairing.js'
import { UnitOfWork } from '../../lib/state/unit-of-work.js'
import { StateRefusedError } from '../../lib/state/unit-of-work.js'
import { refusalOf } from '../../lib/state/outcome.js'
import { RequestAbort } from '../../lib/protocol/request-abort.js'

const QUIET = { error () {}, warn () {}, info () {}, debug () {} }

/** Opens a handle as a call does: in a unit of work of its own, on the handles' backend. */
async function open (handles: StateHandles, kind: string, id: unknown, principal: HandlePrincipal, options: { lock: boolean }): Promise<StateScope | null> {
  const opening = handles.opening(kind, id, principal, options.lock ? 'lock' : 'snapshot')
  if (opening === null) return null
  const backend = handles.backend
  const unit = new UnitOfWork({
    backend,
    waiting: { session: 0, handle: 0, call: 0 },
    refused: (subject, _key, err) => new StateRefusedError(refusalOf(err), subject, err),
    answered: () => {}
  }, { owner: {}, abort: new RequestAbort(), log: QUIET })
  const scope = await unit.open(opening)
  // The tests close the scope themselves: writable, whatever mode it was opened in.
  scope?.handle.seal(null)
  return scope
}

const ALICE = { id: 'alice' }
const BOB = { id: 'bob' }

/** Ids a client might send that must never reach the store (paths, globs, hash-tag braces, 4 KiB). */
const GARBAGE = ['../../etc/passwd', '*', '{x}', 'a'.repeat(4096), '', 'short', 'with space in it ok', '~basket~x', 42, null, { id: 1 }]

async function fileSetup (t: Test): Promise<{ handles: StateHandles, files: () => Promise<string[]> }> {
  const dir = await mkdtemp(join(tmpdir(), 'mcp-handles-'))
  t.teardown(async () => { await rm(dir, { recursive: true, force: true }) })
  const lock = new FileSessionLock({ dir })
  t.teardown(async () => { await lock.close() })
  const handles = new StateHandles(new StateBackend(pairingFor(new FileSessionStore({ dir }), lock)))
  handles.define('basket', { ttl: 60_000 })
  return { handles, files: async () => (await readdir(dir)).sort() }
}

t.test('mint, use by the owner, and the same null for everything else', async t => {
  const store = new MemorySessionStore()
  const handles = new StateHandles(new StateBackend(pairingFor(store, new MemorySessionLock())))
  handles.define('basket', { ttl: 60_000 })
  handles.define('cart', { ttl: 60_000 })
  const id = await handles.create('basket', ALICE, { items: [] })
  t.match(id, /^[A-Za-z0-9_-]{32}$/, '192 random bits, URL-safe')
  t.not(await handles.create('basket', ALICE), id, 'distinct')

  const scope = await open(handles, 'basket', id, ALICE, { lock: true })
  t.ok(scope, 'the owner opens it')
  t.same(scope?.handle.get('items'), [])
  scope?.handle.set('items', ['apple'])
  t.same(await scope?.close(), { status: 'ok' })
  t.same(await handles.read('basket', id), { items: ['apple'] }, 'read out of band')

  t.equal(await open(handles, 'basket', id, BOB, { lock: true }), null, "someone else's")
  t.equal(await open(handles, 'basket', id, null, { lock: true }), null, 'anonymous')
  t.equal(await open(handles, 'cart', id, ALICE, { lock: true }), null, 'another kind')
  t.equal(await open(handles, 'nope', id, ALICE, { lock: true }), null, 'an unknown kind')
  t.equal(await open(handles, 'basket', 'A'.repeat(32), ALICE, { lock: true }), null, 'unknown')
  t.equal(await handles.read('basket', id, BOB), null, 'read with a principal: only its own')
  t.equal(await handles.end('basket', id, BOB), false, 'ended only by its owner')

  t.equal(await handles.end('basket', id, ALICE), true)
  t.equal(await open(handles, 'basket', id, ALICE, { lock: true }), null, 'ended')
  t.equal(await handles.end('basket', id), false, 'ending twice')
})

t.test('anonymous handles are for anonymous callers', async t => {
  const handles = new StateHandles(new StateBackend(pairingFor(new MemorySessionStore(), null)))
  handles.define('basket', { ttl: 60_000 })
  const id = await handles.create('basket', null)
  const scope = await open(handles, 'basket', id, null, { lock: true })
  t.ok(scope)
  await scope?.close()
  t.equal(await open(handles, 'basket', id, ALICE, { lock: true }), null, 'not a principal\'s')
})

t.test('expired by the kind\'s TTL, refreshed by use', async t => {
  const handles = new StateHandles(new StateBackend(pairingFor(new MemorySessionStore({ ttl: 60_000 }), null)))
  handles.define('short', { ttl: 300 })
  const used = await handles.create('short', ALICE)
  const idle = await handles.create('short', ALICE)
  for (let i = 0; i < 3; i++) {
    await sleep(200)
    const scope = await open(handles, 'short', used, ALICE, { lock: false })
    t.ok(scope, `use ${i + 1} keeps it alive`)
    await scope?.close()
  }
  t.equal(await open(handles, 'short', idle, ALICE, { lock: false }), null, 'the idle one expired (600 ms > 300 ms)')
})

t.test('file store and file lock: malformed, unknown and foreign handles create no file', async t => {
  const { handles, files } = await fileSetup(t)
  const id = await handles.create('basket', ALICE)
  const before = await files()
  t.same(before, [`${handleKey('basket', id)}.json`], 'the handle\'s own file')
  for (const bad of GARBAGE) t.equal(await open(handles, 'basket', bad, ALICE, { lock: true }), null, `refused: ${JSON.stringify(bad).slice(0, 40)}`)
  t.equal(await open(handles, 'basket', 'B'.repeat(32), ALICE, { lock: true }), null, 'unknown')
  t.equal(await open(handles, 'basket', id, BOB, { lock: true }), null, 'foreign')
  const after = (await files()).filter(f => !f.endsWith('.lock') || f !== `${handleKey('basket', id)}.lock`)
  t.same(after, before, 'no session, lock or temp file for any of them (the owner\'s own lock file aside)')
  const scope = await open(handles, 'basket', id, ALICE, { lock: true })
  t.ok(scope, 'the owner, through the file lock')
  t.equal(scope?.handle.getProtocol(HANDLE_KEYS.owner), 'alice')
  await scope?.close()
})

t.test('define refuses bad kinds and ttls; create refuses an unknown kind', async t => {
  const handles = new StateHandles(new StateBackend(pairingFor(new MemorySessionStore(), null)))
  t.throws(() => handles.define('Basket', { ttl: 1000 }), TypeError)
  t.throws(() => handles.define('a-b', { ttl: 1000 }), TypeError)
  t.throws(() => handles.define('basket', { ttl: 0 }), TypeError)
  await t.rejects(handles.create('basket', null), TypeError)
})

t.test('gc() collects expired handles by their kind\'s TTL (file and memory stores); live ones stay', async t => {
  const dir = await mkdtemp(join(tmpdir(), 'mcp-handles-gc-'))
  t.teardown(async () => { await rm(dir, { recursive: true, force: true }) })
  for (const store of [new FileSessionStore({ dir, ttl: 60_000 }), new MemorySessionStore({ ttl: 60_000 })]) {
    const handles = new StateHandles(new StateBackend(pairingFor(store, null)))
    handles.define('short', { ttl: 300 })
    handles.define('long', { ttl: 60_000 })
    const short = await handles.create('short', ALICE)
    const long = await handles.create('long', ALICE)
    await sleep(450)
    const collected = await store.gc?.()
    t.ok(collected?.includes(handleKey('short', short)), `${store.constructor.name}: the expired handle was collected`)
    t.notOk(collected?.includes(handleKey('long', long)), `${store.constructor.name}: the live one was not`)
    t.equal(await store.exists(handleKey('short', short)), false)
    t.ok(await handles.read('long', long), 'the live one is still readable')
  }
  t.same((await readdir(dir)).filter(f => f.includes('short')), [], 'no file left for the expired handle')
})
