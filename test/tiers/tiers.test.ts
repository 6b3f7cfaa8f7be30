// The test tiers: which files `npm run test:quick` runs is read from their imports.
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { FULL_ONLY, ROOT, classify, quickFiles, testFiles } from '../../scripts/tiers.js'

const fixture = (name: string): string => `test/tiers/fixtures/${name}.ts`

t.test('a file that imports only lib/ is quick', async t => {
  t.same(classify(fixture('plain')), { tier: 'quick', reasons: [] })
})

t.test('a file that starts a child process is full, directly or through an import', async t => {
  t.same(classify(fixture('spawns')), { tier: 'full', reasons: ['starts a child process'] })
  t.same(classify(fixture('through-fixture')), {
    tier: 'full',
    reasons: ['starts a child process (through test/tiers/fixtures/spawns.ts)']
  })
})

t.test('type-only imports load nothing: quick', async t => {
  t.same(classify(fixture('type-only')), { tier: 'quick', reasons: [] })
})

t.test('a private Redis left running is quick; one it stops makes the file full', async t => {
  t.same(classify(fixture('redis-only')), { tier: 'quick', reasons: [] })
  t.same(classify(fixture('redis-fault')), { tier: 'full', reasons: ['stops, pauses or kills Redis'] })
})

t.test('a file that installs packages is full', async t => {
  t.same(classify(fixture('installs')).reasons, ['installs packages'])
})

t.test('a listed file is full whatever it imports', async t => {
  t.same(classify(fixture('plain'), ROOT, { [fixture('plain')]: 'waits out long timers' }), {
    tier: 'full',
    reasons: ['listed: waits out long timers']
  })
})

t.test('every listed file exists (a renamed file must not fall back into the quick tier)', async t => {
  for (const file of Object.keys(FULL_ONLY)) t.ok(existsSync(join(ROOT, file)), file)
})

t.test('the suite: the slow kinds are full, unit and contract files quick', async t => {
  const all = testFiles()
  const quick = new Set(quickFiles())
  t.ok(all.includes('test/tiers/tiers.test.ts'), 'finds the test files')
  for (const slow of ['test/package/pack.test.ts', 'test/many/kill.test.ts', 'test/concurrency/redis-outage.test.ts']) {
    t.ok(all.includes(slow), `${slow} exists`)
    t.notOk(quick.has(slow), `${slow} is full only`)
  }
  for (const fast of ['test/features/method-table.test.ts', 'test/sessions/memory-store.test.ts', 'test/tiers/tiers.test.ts']) {
    t.ok(quick.has(fast), `${fast} is quick`)
  }
})
