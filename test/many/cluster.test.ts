/**
 * The Redis part of the suite on a 3-master Redis Cluster, with the demo's client setup: store
 * and plugin (bus, event log) on one `Cluster` with ioredis' defaults, the lock on a fail-fast one.
 */
import t from 'tap'
import { clusterSuite } from './fixtures/cluster-suite.js'

t.setTimeout(120_000)
await clusterSuite(t, { failFast: false })
