/**
 * A map by string key and a set of objects, for entries that come and go on every request (the
 * sessions with a request in flight here, the sessions this process hears, a lock's held keys and
 * leases). V8 rebuilds a Map's or Set's table, in a runtime call, whenever a delete leaves fewer
 * entries than half its buckets: one going from one entry to none and back allocates a new table
 * on every request, and every delete pays for a runtime call (docs/performance.md has the
 * figures). These keep a
 * placeholder entry of their own, which they never hand out, so that the table never empties and
 * is never shrunk: its deleted slots are reclaimed when an insert finds the table full (every
 * third insert at the smallest size), a third of the tables and no runtime call on delete.
 * (lib/linked-list.ts allocates nothing at all, but its members carry their links: leases and
 * renewals as members made its two methods see more classes than V8 keeps fast, which cost more
 * than the set.) Imports nothing, so every room may use it.
 *
 * A rebuilt table (these, or any Map or Set) leaves the old table's entries in place, and an old
 * table that reached V8's old generation keeps them alive through young-generation collections:
 * an entry that refers to a request should let go of it when it leaves (`Lease.claim()`, the
 * KeyedFifo's freed slot), or each request is copied into the old generation at 50 in flight.
 */

/** The map's placeholder key: a symbol, so no string key can meet it. */
const PLACEHOLDER = Symbol('steady-map placeholder')

/** The map (see the module doc): the part of `Map`'s surface the callers use. */
export class SteadyMap<V> {
  readonly #map = new Map<string | symbol, V | undefined>([[PLACEHOLDER, undefined]])

  /** Entries, the placeholder not counted. */
  get size (): number { return this.#map.size - 1 }

  get (key: string): V | undefined { return this.#map.get(key) }

  has (key: string): boolean { return this.#map.has(key) }

  set (key: string, value: V): this {
    this.#map.set(key, value)
    return this
  }

  delete (key: string): boolean { return this.#map.delete(key) }

  /** The keys now (a copy: the caller may delete while it walks them). */
  keys (): string[] {
    const out: string[] = []
    for (const key of this.#map.keys()) if (key !== PLACEHOLDER) out.push(key as string)
    return out
  }

  /** The values now (a copy, as {@link keys}). */
  values (): V[] {
    const out: V[] = []
    for (const [key, value] of this.#map) if (key !== PLACEHOLDER) out.push(value as V)
    return out
  }

  /** Deletes every entry but the placeholder. */
  clear (): void {
    this.#map.clear()
    this.#map.set(PLACEHOLDER, undefined)
  }
}

/** The set (see the module doc): the part of `Set`'s surface the callers use. */
export class SteadySet<T extends object> {
  /** Its own placeholder: an object no caller has. */
  readonly #placeholder = {}
  readonly #set = new Set<object>([this.#placeholder])

  /** Members, the placeholder not counted. */
  get size (): number { return this.#set.size - 1 }

  add (member: T): this {
    this.#set.add(member)
    return this
  }

  delete (member: T): boolean { return this.#set.delete(member) }

  /** The members now, oldest first (a copy: the caller may delete while it walks them). */
  values (): T[] {
    const out: T[] = []
    for (const member of this.#set) if (member !== this.#placeholder) out.push(member as T)
    return out
  }

  /** Deletes every member but the placeholder. */
  clear (): void {
    this.#set.clear()
    this.#set.add(this.#placeholder)
  }
}
