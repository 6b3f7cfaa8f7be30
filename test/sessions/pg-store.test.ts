import t from 'tap'
import { PgSessionStore } from '../../lib/sessions/pg-store.js'
import { createTestDatabase } from '../helpers/postgres.js'
import { runSessionStoreContract } from './store-contract.js'

const db = await createTestDatabase(t)
let n = 0

runSessionStoreContract(t, 'PgSessionStore', (t, { ttl }) => {
  const pool = db.pool({ max: 4 })
  return new PgSessionStore({ pool, ttl, prefix: `t${n++}_` })
})
