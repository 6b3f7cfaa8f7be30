/**
 * Which client each record of the memory store counts against, for the choice of what goes when
 * the store is full: a record of the owner holding the most records — its least recently used.
 * A client that floods the store (sessions, handles, finished tasks: each is a record it can make
 * cheaply and touch as cheaply) pushes out its own records first — its never-used ones (created,
 * not loaded or saved since) before the others, as the store does; a record of a client holding
 * fewer goes only once no owner holds more, i.e. after the flood came from as many different
 * owners (principals, addresses, IPv6 /64 networks) as the store holds records per owner.
 *
 * Among owners holding as many records, those with a never-used record go first, then the one
 * whose last activity (a record made or used) is the oldest: an owner that keeps using its record
 * outlives the ones that went quiet, whatever order they came in.
 *
 * The owners are kept in buckets by how many records they hold (those with a never-used record
 * apart), each a list in order of last activity, the highest non-empty bucket known; each owner's
 * records are two lists through the records themselves (never used, in creation order; used, in
 * last-access order). Adding, touching and choosing are O(1); a removal puts the owner back in
 * its new bucket at its place by last activity (a walk from both ends of that bucket's list, as
 * long as the owners between it and the nearer end).
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
  /** The index's tick at its last activity (a record added or touched). */
  active: number
  /** Its links in its bucket's list (least recently active first). */
  prev: Owner | null
  next: Owner | null
}

/** Owners in order of last activity, least recent first. */
class OwnerList {
  head: Owner | null = null
  tail: Owner | null = null

  get empty (): boolean { return this.head === null }

  push (owner: Owner): void {
    this.#insertAfter(owner, this.tail)
  }

  /**
   * Puts `owner` at its place by `active`, looking from both ends at once: as many steps as there
   * are owners between it and the nearer end (an idle owner near the front, an active one near the
   * back).
   */
  place (owner: Owner): void {
    let back = this.tail
    let front = this.head
    while (back !== null && front !== null) {
      if (back.active <= owner.active) { this.#insertAfter(owner, back); return }
      if (front.active > owner.active) { this.#insertAfter(owner, front.prev); return }
      back = back.prev
      front = front.next
    }
    this.#insertAfter(owner, null)
  }

  remove (owner: Owner): void {
    const { prev, next } = owner
    if (prev === null) this.head = next
    else prev.next = next
    if (next === null) this.tail = prev
    else next.prev = prev
    owner.prev = null
    owner.next = null
  }

  #insertAfter (owner: Owner, after: Owner | null): void {
    const next = after === null ? this.head : after.next
    owner.prev = after
    owner.next = next
    if (after === null) this.head = owner
    else after.next = owner
    if (next === null) this.tail = owner
    else next.prev = owner
  }
}

/** The owners holding one number of records: those with a never-used record apart (they go first). */
interface Bucket { readonly withFresh: OwnerList, readonly allUsed: OwnerList }

export class OwnerIndex {
  readonly #owners = new Map<string, Owner>()
  /** `#byCount[n]`: the owners holding exactly `n` records. */
  readonly #byCount: Array<Bucket | undefined> = []
  #most = 0
  /** Counts activities: an owner's `active` is the tick of its last one. */
  #tick = 0

  /** Owners holding at least one record. */
  get size (): number { return this.#owners.size }

  /** Records `key` holds. */
  countOf (key: string): number { return this.#owners.get(key)?.count ?? 0 }

  /**
   * Counts `record` (in no owner's list yet) against `key`, as its newest never-used record, or
   * (`used`) as its most recently used one.
   */
  add (record: Owned, key: string, used = false): void {
    let owner = this.#owners.get(key)
    if (owner === undefined) {
      owner = { key, count: 0, fresh: { head: null, tail: null }, used: { head: null, tail: null }, active: 0, prev: null, next: null }
      this.#owners.set(key, owner)
    } else {
      this.#leave(owner)
    }
    record.owner = owner
    record.ownerUsed = used
    append(used ? owner.used : owner.fresh, record)
    owner.count++
    owner.active = ++this.#tick
    this.#enter(owner, true)
  }

  /** `record` was used: the last of its owner's used list, and its owner the most recently active. */
  touch (record: Owned): void {
    const owner = record.owner
    if (owner === null) return
    owner.active = ++this.#tick
    if (!record.ownerUsed) {
      // Its last never-used record used: the owner no longer goes before those of its count.
      this.#leave(owner)
      unlink(owner.fresh, record)
      record.ownerUsed = true
      append(owner.used, record)
      this.#enter(owner, true)
      return
    }
    if (owner.used.tail !== record) {
      unlink(owner.used, record)
      append(owner.used, record)
    }
    // The most recently active of its bucket: at the end of its list.
    if (owner.next !== null) {
      const list = this.#listOf(owner)
      list.remove(owner)
      list.push(owner)
    }
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
    // Not an activity of the owner's: it goes back at its place among the owners of its new count.
    else this.#enter(owner, false)
  }

  /**
   * The record to evict: of an owner holding the most — one with a never-used record first, the
   * least recently active among them — its oldest never-used record, else its least recently
   * used; `null` when empty.
   */
  victim (): Owned | null {
    const bucket = this.#byCount[this.#most]
    if (bucket === undefined) return null
    const fresh = bucket.withFresh.head
    if (fresh !== null) return fresh.fresh.head
    return bucket.allUsed.head?.used.head ?? null
  }

  /** The list `owner` is in (it holds at least one record). */
  #listOf (owner: Owner): OwnerList {
    const bucket = this.#byCount[owner.count] as Bucket
    return owner.fresh.head !== null ? bucket.withFresh : bucket.allUsed
  }

  /** Takes `owner` out of its bucket (before its count or its never-used records change). */
  #leave (owner: Owner): void {
    this.#listOf(owner).remove(owner)
    // Counts change by one: the highest bucket is the same, or the one below the emptied one —
    // where the owner goes back when it lost a record (one that gained one goes above it). One
    // step: walking down past empty buckets cost a step per record of an owner holding them all.
    if (this.#most === owner.count && isEmpty(this.#byCount[this.#most])) this.#most--
  }

  /** Puts `owner` (holding at least one record) in the bucket of its count: last (`latest`), or at its place. */
  #enter (owner: Owner, latest: boolean): void {
    let bucket = this.#byCount[owner.count]
    if (bucket === undefined) bucket = this.#byCount[owner.count] = { withFresh: new OwnerList(), allUsed: new OwnerList() }
    const list = owner.fresh.head !== null ? bucket.withFresh : bucket.allUsed
    if (latest) list.push(owner)
    else list.place(owner)
    if (owner.count > this.#most) this.#most = owner.count
  }
}

function isEmpty (bucket: Bucket | undefined): boolean {
  return bucket === undefined || (bucket.withFresh.empty && bucket.allUsed.empty)
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
