/**
 * Which client each record of the memory store counts against, for the choice of what goes when
 * the store is full: a record of the owner holding the most records — its least recently used.
 * A client that floods the store (sessions, handles, finished tasks: each is a record it can make
 * cheaply and touch as cheaply) pushes out its own records first — its never-used ones (created,
 * not loaded or saved since) before the others, as the store does; a record of a client holding
 * fewer goes only once no owner holds more, i.e. after the flood came from as many different
 * owners (principals, addresses, IPv6 /64 networks) as the store holds records per owner.
 *
 * The owners are kept in buckets by how many records they hold (those with a never-used record
 * apart: among owners holding as many, they go first), the highest non-empty one known, and each owner's records in two lists through the records themselves (never used, in creation
 * order; used, in last-access order): adding, touching, removing and choosing are O(1).
 */

/** A record as the index sees it: its owner, and its links in one of that owner's lists. */
export interface Owned {
  owner: Owner | null
  /** In the owner's `used` list (touched since it was added), else in `fresh`. */
  ownerUsed: boolean
  ownerPrev: Owned | null
  ownerNext: Owned | null
}

interface Chain { head: Owned | null, tail: Owned | null }

/** One owner's records: never used (creation order) and used (least recently used first). */
export interface Owner {
  readonly key: string
  count: number
  readonly fresh: Chain
  readonly used: Chain
}

/** The owners holding one number of records: those with a never-used record apart (they go first). */
interface Bucket { withFresh: Set<Owner>, allUsed: Set<Owner> }

export class OwnerIndex {
  readonly #owners = new Map<string, Owner>()
  /** `#byCount[n]`: the owners holding exactly `n` records. */
  readonly #byCount: Array<Bucket | undefined> = []
  #most = 0

  /** Owners holding at least one record. */
  get size (): number { return this.#owners.size }

  /** Records `key` holds. */
  countOf (key: string): number { return this.#owners.get(key)?.count ?? 0 }

  /** Counts `record` (in no owner's list yet) against `key`, as its newest never-used record. */
  add (record: Owned, key: string): void {
    let owner = this.#owners.get(key)
    if (owner === undefined) {
      owner = { key, count: 0, fresh: { head: null, tail: null }, used: { head: null, tail: null } }
      this.#owners.set(key, owner)
    }
    this.#leave(owner)
    record.owner = owner
    record.ownerUsed = false
    append(owner.fresh, record)
    owner.count++
    this.#enter(owner)
  }

  /** `record` was used: the last of its owner's used list. */
  touch (record: Owned): void {
    const owner = record.owner
    if (owner === null || owner.used.tail === record) return
    if (record.ownerUsed) {
      unlink(owner.used, record)
      append(owner.used, record)
      return
    }
    // Its last never-used record used: the owner no longer goes before those of its count.
    this.#leave(owner)
    unlink(owner.fresh, record)
    record.ownerUsed = true
    append(owner.used, record)
    this.#enter(owner)
  }

  /** `record` is gone. */
  remove (record: Owned): void {
    const owner = record.owner
    if (owner === null) return
    this.#leave(owner)
    unlink(record.ownerUsed ? owner.used : owner.fresh, record)
    record.owner = null
    owner.count--
    if (owner.count === 0) this.#owners.delete(owner.key)
    else this.#enter(owner)
  }

  /**
   * The record to evict: of an owner holding the most — one with a never-used record first — its
   * oldest never-used record, else its least recently used; `null` when empty.
   */
  victim (): Owned | null {
    const bucket = this.#byCount[this.#most]
    if (bucket === undefined) return null
    // The first owner of each set (any of them holds the most): sets iterate in insertion order.
    const fresh = first(bucket.withFresh)
    if (fresh !== undefined) return fresh.fresh.head
    return first(bucket.allUsed)?.used.head ?? null
  }

  /** Takes `owner` out of its bucket (before its count or its never-used records change). */
  #leave (owner: Owner): void {
    const bucket = this.#byCount[owner.count]
    if (bucket === undefined) return
    bucket.withFresh.delete(owner)
    bucket.allUsed.delete(owner)
    // Counts change by one: the highest bucket is the same, or the one below the emptied one.
    while (this.#most > 0 && isEmpty(this.#byCount[this.#most])) this.#most--
  }

  /** Puts `owner` (holding at least one record) in the bucket of its count. */
  #enter (owner: Owner): void {
    let bucket = this.#byCount[owner.count]
    if (bucket === undefined) bucket = this.#byCount[owner.count] = { withFresh: new Set(), allUsed: new Set() }
    if (owner.fresh.head !== null) bucket.withFresh.add(owner)
    else bucket.allUsed.add(owner)
    if (owner.count > this.#most) this.#most = owner.count
  }
}

function isEmpty (bucket: Bucket | undefined): boolean {
  return bucket === undefined || (bucket.withFresh.size === 0 && bucket.allUsed.size === 0)
}

function append (chain: Chain, record: Owned): void {
  record.ownerPrev = chain.tail
  record.ownerNext = null
  if (chain.tail === null) chain.head = record
  else chain.tail.ownerNext = record
  chain.tail = record
}

function unlink (chain: Chain, record: Owned): void {
  const { ownerPrev: prev, ownerNext: next } = record
  if (prev === null) chain.head = next
  else prev.ownerNext = next
  if (next === null) chain.tail = prev
  else next.ownerPrev = prev
  record.ownerPrev = null
  record.ownerNext = null
}

function first<T> (set: Set<T>): T | undefined {
  return set.values().next().value
}
