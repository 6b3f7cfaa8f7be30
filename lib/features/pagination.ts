/**
 * Opaque cursors for the list methods. A cursor names the list and the offset, and is checked on
 * the way back in: a cursor that was not made by us, or for another list, is `-32602`.
 */
import { ErrorCode, McpError } from '../jsonrpc/errors.js'

export function encodeCursor (list: string, offset: number): string {
  return Buffer.from(JSON.stringify([list, offset])).toString('base64url')
}

/** Returns the offset of a cursor (0 when absent); throws -32602 on a bad cursor. */
export function decodeCursor (list: string, cursor: unknown): number {
  if (cursor === undefined || cursor === null) return 0
  if (typeof cursor === 'string' && cursor.length <= 256) {
    try {
      const v = JSON.parse(Buffer.from(cursor, 'base64url').toString()) as unknown
      if (Array.isArray(v) && v.length === 2 && v[0] === list && Number.isInteger(v[1]) && (v[1] as number) >= 0) return v[1] as number
    } catch {}
  }
  throw new McpError(ErrorCode.InvalidParams, 'Invalid params: invalid cursor')
}

/** One page of `items` starting at the cursor. */
export function paginate<T> (list: string, items: T[], cursor: unknown, pageSize: number): { page: T[], nextCursor?: string } {
  const offset = decodeCursor(list, cursor)
  if (offset > items.length) throw new McpError(ErrorCode.InvalidParams, 'Invalid params: invalid cursor')
  const page = items.slice(offset, offset + pageSize)
  const next = offset + pageSize
  return next < items.length ? { page, nextCursor: encodeCursor(list, next) } : { page }
}
