/**
 * Request checks that run before any MCP processing: Origin allow-list and the Host check that
 * protects loopback binds from DNS rebinding (403), Content-Type (415), Accept (406).
 */
import type { FastifyRequest } from 'fastify'
import { ErrorCode, type RequestId } from '../jsonrpc/messages.js'
import { HttpRefusal } from '../protocol/legacy.js'
import type { ResolvedOptions } from '../options.js'

function isLoopbackAddress (addr: string | undefined): boolean {
  if (addr === undefined) return true // app.inject(): no socket address
  return addr === '::1' || addr.startsWith('127.') || addr.startsWith('::ffff:127.')
}

/** 403 for a present, disallowed Origin, or a non-loopback Host on a loopback connection. */
export function checkOrigin (request: FastifyRequest, opts: ResolvedOptions): void {
  const origin = request.headers.origin
  if (origin !== undefined && !opts.allowedOrigins(origin)) {
    throw new HttpRefusal(403, null, ErrorCode.InvalidRequest, 'Forbidden: origin not allowed')
  }
  if (isLoopbackAddress(request.socket?.localAddress)) {
    const host = request.headers.host
    if (host === undefined || !opts.allowedHosts(host)) {
      throw new HttpRefusal(403, null, ErrorCode.InvalidRequest, 'Forbidden: host not allowed')
    }
  }
}

function mediaTypes (accept: string | undefined): string[] {
  if (accept === undefined) return []
  return accept.split(',').map(p => p.split(';')[0].trim().toLowerCase())
}

/** For POST: the client must accept JSON and SSE (406). Returns whether it accepts only SSE. */
export function checkPostAccept (request: FastifyRequest, id: RequestId | null): { sseOnly: boolean } {
  const types = mediaTypes(request.headers.accept)
  const any = types.includes('*/*')
  const json = any || types.includes('application/json') || types.includes('application/*')
  const sse = any || types.includes('text/event-stream') || types.includes('text/*')
  // Without SSE the server could not send progress or requests to the client; a client that
  // accepts only SSE gets every response as a stream.
  if (!sse) {
    throw new HttpRefusal(406, id, ErrorCode.ServerError, 'Not Acceptable: the client must accept application/json and text/event-stream')
  }
  return { sseOnly: !json }
}

/** For GET: the client must accept SSE (406). */
export function checkGetAccept (request: FastifyRequest): void {
  const types = mediaTypes(request.headers.accept)
  if (!types.includes('text/event-stream') && !types.includes('*/*') && !types.includes('text/*')) {
    throw new HttpRefusal(406, null, ErrorCode.ServerError, 'Not Acceptable: the client must accept text/event-stream')
  }
}

/** For POST: the body must be JSON (415). */
export function checkContentType (request: FastifyRequest): void {
  const ct = request.headers['content-type']
  const type = ct?.split(';')[0].trim().toLowerCase()
  if (type !== 'application/json') {
    throw new HttpRefusal(415, null, ErrorCode.InvalidRequest, 'Unsupported Media Type: Content-Type must be application/json')
  }
}
