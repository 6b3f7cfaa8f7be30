/**
 * A doubly linked list through its members' own `prev`/`next` fields, for the sets the request
 * path enters and leaves on every request (the POSTs the drain tracks, a session's requests in
 * flight): adding and removing allocate nothing, where a Set going from one member to none and
 * back shrinks and regrows its table each time. Imports nothing, so every room may use it.
 */

/** A member's links: set by the list only (`null` while it is in no list, or at an end). */
export interface Linked<T> {
  prev: T | null
  next: T | null
}

/** The list (see the module doc). A member is in at most one list at a time. */
export class LinkedList<T extends Linked<T>> {
  head: T | null = null
  tail: T | null = null
  /** Members in the list. */
  size = 0

  /** Appends `node`, which must be in no list. */
  push (node: T): void {
    const tail = this.tail
    node.prev = tail
    node.next = null
    if (tail === null) this.head = node
    else tail.next = node
    this.tail = node
    this.size++
  }

  /** Removes `node`, which must be in this list (the caller knows: removing twice corrupts it). */
  remove (node: T): void {
    const { prev, next } = node
    if (prev === null) this.head = next
    else prev.next = next
    if (next === null) this.tail = prev
    else next.prev = prev
    node.prev = null
    node.next = null
    this.size--
  }

  /** The members now, oldest first: a copy, so that the caller may remove them as it goes. */
  toArray (): T[] {
    const all: T[] = []
    for (let n = this.head; n !== null; n = n.next) all.push(n)
    return all
  }
}
