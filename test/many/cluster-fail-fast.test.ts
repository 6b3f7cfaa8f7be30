/**
 * The Redis part of the suite on a 3-master Redis Cluster with EVERY client fail-fast (no offline
 * queue, 500 ms command timeout): the bus must still subscribe (its sharded subscriber keeps an
 * offline queue of its own; before that fix the instances crashed at start-up).
 */
import t from 'tap'
import { clusterSuite } from './fixtures/cluster-suite.js'

t.setTimeout(120_000)
await clusterSuite(t, { failFast: true })
