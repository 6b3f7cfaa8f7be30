/**
 * Per-definition access (lib/auth/access.ts): validating `scopes` / `visible`, the decision for a
 * principal, what each method addresses, the gate (403 naming every scope needed, 401 for an
 * anonymous caller, hidden and unknown targets passed on to the method to answer as unknown),
 * list filtering and the list cache scope.
 */
import t from 'tap'
import type { McpPrincipal } from '../../lib/context.js'
import {
  accessRuleOf, accessTarget, authorizeMessages, decideAccess, dependsOnPrincipal, hasScopes, isVisible, listCacheScope, principalScopes,
  visibleTo, type AccessRule, type AccessRuleSource, type AccessTarget
} from '../../lib/auth/access.js'
import { AuthError } from '../../lib/auth/bearer.js'

const MD = 'https://mcp.example.com/.well-known/oauth-protected-resource/mcp'
const alice: McpPrincipal = { id: 'alice', scopes: ['cart:read'] }
const admin: McpPrincipal = { id: 'root', scopes: ['cart:read', 'cart:write', 'admin'] }
const noScopes: McpPrincipal = { id: 'bob' }
const adminsOnly = (p: McpPrincipal | null): boolean => hasScopes(p, 'admin')

t.test('accessRuleOf validates and normalizes', async t => {
  t.equal(accessRuleOf({}), undefined)
  const rule = accessRuleOf({ scopes: ['a', 'b', 'a'], visible: adminsOnly })
  t.same(rule?.scopes, ['a', 'b'], 'duplicates dropped')
  t.equal(rule?.visible, adminsOnly)
  t.ok(Object.isFrozen(rule))
  t.equal(accessRuleOf({ scopes: [] }), undefined, 'no scopes and no predicate: no rule (open to all)')
  t.throws(() => accessRuleOf({ scopes: 'a' }), /scopes must be an array/)
  t.throws(() => accessRuleOf({ scopes: ['a b'] }), /scope tokens/)
  t.throws(() => accessRuleOf({ scopes: ['a"b'] }), /scope tokens/)
  t.throws(() => accessRuleOf({ visible: true }), /visible must be a function/)
})

t.test('principal scopes: from any principal with a scopes array', async t => {
  t.same([...principalScopes(alice)], ['cart:read'])
  t.same([...principalScopes(noScopes)], [])
  t.same([...principalScopes(null)], [])
  t.same([...principalScopes({ id: 'x', scopes: 'admin' })], [], 'a string is not a scope list')
  t.same([...principalScopes({ id: 'x', scopes: ['a', 1] })], ['a'])
  t.ok(hasScopes(admin, 'admin', 'cart:write'))
  t.notOk(hasScopes(alice, 'cart:read', 'cart:write'))
})

t.test('decideAccess', async t => {
  t.same(decideAccess(undefined, null), { visible: true, allowed: true })
  const write = accessRuleOf({ scopes: ['cart:read', 'cart:write'] })
  t.same(decideAccess(write, alice), { visible: true, allowed: false, required: ['cart:read', 'cart:write'], missing: ['cart:write'] })
  t.same(decideAccess(write, admin), { visible: true, allowed: true })
  t.same(decideAccess(write, null), { visible: true, allowed: false, required: ['cart:read', 'cart:write'], missing: ['cart:read', 'cart:write'] })
  const hidden = accessRuleOf({ scopes: ['admin'], visible: adminsOnly })
  t.same(decideAccess(hidden, alice), { visible: false }, 'hidden wins over scopes: no hint that it exists')
  t.same(decideAccess(hidden, admin), { visible: true, allowed: true })
})

t.test('visible must return true: anything else hides; a throw is not swallowed', async t => {
  const rule = (visible: unknown): AccessRule => ({ visible: visible as AccessRule['visible'] })
  t.notOk(isVisible(rule(() => 'yes'), alice))
  t.notOk(isVisible(rule(async () => true), alice), 'an async predicate (a Promise) hides')
  t.notOk(isVisible(rule(() => undefined), alice))
  t.ok(isVisible(rule(() => true), alice))
  t.throws(() => isVisible(rule(() => { throw new Error('bug') }), alice), /bug/)
  let seen: unknown = 'unset'
  isVisible(rule((p: unknown) => { seen = p; return true }), null)
  t.equal(seen, null, 'anonymous callers are asked about as null')
})

t.test('visibleTo filters lists in order; cache scope follows', async t => {
  const items = [
    { name: 'a', access: undefined },
    { name: 'secret', access: accessRuleOf({ visible: adminsOnly }) },
    { name: 'scoped', access: accessRuleOf({ scopes: ['cart:write'] }) },
    { name: 'z', access: undefined }
  ]
  t.same(visibleTo(items, alice, i => i.access).map(i => i.name), ['a', 'scoped', 'z'], 'scoped stays listed: the client may step up')
  t.same(visibleTo(items, admin, i => i.access).map(i => i.name), ['a', 'secret', 'scoped', 'z'])
  const depends = items.some(i => dependsOnPrincipal(i.access))
  t.ok(depends)
  t.equal(listCacheScope('public', depends), 'private', 'a list that hides things is never shared between principals')
  t.equal(listCacheScope('public', false), 'public')
  t.equal(listCacheScope('private', false), 'private')
  t.notOk(dependsOnPrincipal(accessRuleOf({ scopes: ['x'] })), 'scopes alone do not change what is listed')
})

t.test('accessTarget: what each method addresses', async t => {
  t.same(accessTarget('tools/call', { name: 'buy' }), { kind: 'tool', name: 'buy' })
  t.same(accessTarget('prompts/get', { name: 'p' }), { kind: 'prompt', name: 'p' })
  t.same(accessTarget('resources/read', { uri: 'shop://a' }), { kind: 'resource', uri: 'shop://a' })
  t.same(accessTarget('resources/subscribe', { uri: 'shop://a' }), { kind: 'resource', uri: 'shop://a' })
  t.same(accessTarget('resources/unsubscribe', { uri: 'shop://a' }), { kind: 'resource', uri: 'shop://a' })
  t.same(accessTarget('completion/complete', { ref: { type: 'ref/prompt', name: 'p' } }), { kind: 'prompt', name: 'p' })
  t.same(accessTarget('completion/complete', { ref: { type: 'ref/resource', uri: 'shop://items/{id}' } }), { kind: 'template', uriTemplate: 'shop://items/{id}' })
  t.equal(accessTarget('tools/list', {}), null)
  t.equal(accessTarget('tools/call', { name: 3 }), null, 'malformed params: the method answers them')
  t.equal(accessTarget('tools/call', undefined), null)
  t.equal(accessTarget('completion/complete', { ref: 'x' }), null)
  t.equal(accessTarget('completion/complete', { ref: { type: 'ref/other' } }), null)
})

/** A registry stand-in holding rules by target (the real one lives in features/, wired by the lead). */
function source (rules: Record<string, AccessRule | undefined>): AccessRuleSource {
  const key = (tgt: AccessTarget): string => tgt.kind === 'tool' || tgt.kind === 'prompt' ? `${tgt.kind}:${tgt.name}` : tgt.kind === 'resource' ? `resource:${tgt.uri}` : `template:${tgt.uriTemplate}`
  return { accessRule: (tgt) => rules[key(tgt)] }
}

const rules = source({
  'tool:checkout': accessRuleOf({ scopes: ['cart:read', 'cart:write'] }),
  'tool:browse': accessRuleOf({ scopes: ['cart:read'] }),
  'tool:purge': accessRuleOf({ scopes: ['admin'], visible: adminsOnly }),
  'tool:free': undefined,
  'resource:shop://secret': accessRuleOf({ scopes: ['admin'] }),
  'prompt:p': accessRuleOf({ scopes: ['prompts'] })
})

function refusal (fn: () => void): AuthError {
  try { fn() } catch (err) { if (err instanceof AuthError) return err; throw err }
  throw new Error('expected a refusal')
}

t.test('the gate: missing scope → 403 naming every scope the tool needs', async t => {
  const err = refusal(() => authorizeMessages([{ method: 'tools/call', params: { name: 'checkout' } }], alice, rules, { resourceMetadata: MD }))
  t.equal(err.status, 403)
  t.equal(err.headers['www-authenticate'],
    `Bearer error="insufficient_scope", error_description="The access token lacks a scope this request needs", scope="cart:read cart:write", resource_metadata="${MD}"`,
    'cart:read is held, and still named')
  t.match(err.data, { scope: 'cart:read cart:write' })
})

t.test('the gate: scopes every request needs are named too', async t => {
  const err = refusal(() => authorizeMessages([{ method: 'tools/call', params: { name: 'checkout' } }], { id: 'a', scopes: ['mcp', 'cart:read'] }, rules,
    { resourceMetadata: MD, alsoRequired: ['mcp'] }))
  t.match(err.headers['www-authenticate'], /scope="mcp cart:read cart:write"/)
})

t.test('the gate: a batch names the scopes of all its requests, allowed ones included', async t => {
  const batch = [{ method: 'tools/call', params: { name: 'browse' } }, { method: 'prompts/get', params: { name: 'p' } }, { method: 'tools/list' }]
  const err = refusal(() => authorizeMessages(batch, alice, rules))
  t.equal(err.status, 403)
  t.match(err.headers['www-authenticate'], /scope="cart:read prompts"/)
  t.notMatch(err.headers['www-authenticate'], /resource_metadata/, 'custom authenticate: no metadata link')
})

t.test('the gate: anonymous callers get 401 with the scope to ask for', async t => {
  const err = refusal(() => authorizeMessages([{ method: 'resources/read', params: { uri: 'shop://secret' } }], null, rules, { resourceMetadata: MD }))
  t.equal(err.status, 401)
  t.equal(err.headers['www-authenticate'], `Bearer scope="admin", resource_metadata="${MD}"`)
})

t.test('the gate lets through what it must not decide', async t => {
  const pass = (messages: Array<{ method: string, params?: Record<string, unknown> }>, p: McpPrincipal | null): void => {
    t.doesNotThrow(() => { authorizeMessages(messages, p, rules) }, JSON.stringify(messages))
  }
  pass([{ method: 'tools/call', params: { name: 'checkout' } }], admin)
  pass([{ method: 'tools/call', params: { name: 'purge' } }], alice) // hidden: the method answers "unknown tool"
  pass([{ method: 'tools/call', params: { name: 'nope' } }], alice) // unknown
  pass([{ method: 'tools/call', params: { name: 'free' } }], null)
  pass([{ method: 'tools/list' }, { method: 'server/discover' }], null)
  pass([{ method: 'tools/call', params: { name: 42 } }], alice) // malformed: the method's -32602
})

t.test('hidden and unknown get the same treatment everywhere', async t => {
  const hidden = rules.accessRule({ kind: 'tool', name: 'purge' })
  const unknown = rules.accessRule({ kind: 'tool', name: 'does-not-exist' })
  t.same(decideAccess(hidden, alice).visible, false)
  t.same(decideAccess(unknown, alice).visible, true, 'an unknown tool has no rule: the method says unknown')
  t.doesNotThrow(() => { authorizeMessages([{ method: 'tools/call', params: { name: 'purge' } }], alice, rules) })
  t.doesNotThrow(() => { authorizeMessages([{ method: 'tools/call', params: { name: 'does-not-exist' } }], alice, rules) })
})
