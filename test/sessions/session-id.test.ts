import t from 'tap'
import {
  FILE_SAFE_SESSION_ID_PATTERN, SESSION_ID_PATTERN, generateSessionId, isFileSafeSessionId, isValidSessionId
} from '../../lib/sessions/session-id.js'

t.test('minted ids: 32 base64url characters, unique, valid for every store', async t => {
  const ids = new Set(Array.from({ length: 1000 }, () => generateSessionId()))
  t.equal(ids.size, 1000)
  for (const id of ids) {
    if (!/^[A-Za-z0-9_-]{32}$/.test(id) || !isValidSessionId(id) || !isFileSafeSessionId(id)) {
      t.fail(`bad id ${id}`)
    }
  }
})

t.test('a session id is visible ASCII (0x21-0x7E), 1 to 256 characters', async t => {
  for (const ok of ['a', '!~', '\x21\x7e', 'abc-DEF_123.{}/:', 'x'.repeat(256)]) t.ok(isValidSessionId(ok), JSON.stringify(ok))
  for (const bad of ['', ' ', 'a b', 'tab\t', 'nl\n', '\nnl', '\x20x', 'x\x7f', '\x7f', 'é', 'a\u{1F600}', '\0', 'x'.repeat(257), 42, null, undefined]) {
    t.notOk(isValidSessionId(bad), JSON.stringify(bad))
  }
  // The check agrees with the pattern it stands for, character by character.
  for (let c = 0; c < 0x180; c++) {
    const id = `ab${String.fromCharCode(c)}cd`
    if (isValidSessionId(id) !== SESSION_ID_PATTERN.test(id)) t.fail(`disagrees with the pattern on ${c}`)
  }
  t.equal(SESSION_ID_PATTERN.source, '^[\\x21-\\x7E]{1,256}$')
})

t.test('a file-safe id is ^[A-Za-z0-9_-]{16,128}$', async t => {
  t.equal(FILE_SAFE_SESSION_ID_PATTERN.source, '^[A-Za-z0-9_-]{16,128}$')
  t.ok(isFileSafeSessionId('a'.repeat(16)))
  t.ok(isFileSafeSessionId('A-_z'.repeat(32)))
  for (const bad of ['a'.repeat(15), 'a'.repeat(129), '../../etc/passwd', 'aaaaaaaaaaaaaaaa/b', 'aaaaaaaaaaaaaaaa.json',
    'aaaaaaaaaaaaaaaa\\x', 'aaaaaaaaaaaaaaa\0', 'aaaaaaaaaaaaaaaa\n', 123]) {
    t.notOk(isFileSafeSessionId(bad), JSON.stringify(bad))
  }
})
