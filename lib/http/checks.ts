/**
 * Request checks that run before any MCP processing: Origin allow-list and the Host check that
 * protects loopback binds from DNS rebinding (403), Content-Type (415), Accept (406).
 */
import type { FastifyRequest } from 'fastify'
import { ErrorCode, type RequestId } from '../jsonrpc/errors.js'
import type { ResolvedOptions } from '../options.js'
import { HttpRefusal } from './refusal.js'

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

/** What an Accept header allows, for the POST and GET checks. */
interface Acceptance { json: boolean, sse: boolean }

/**
 * Clients send the same Accept on every request: what each value allows is remembered (a bounded
 * map, emptied when full, so odd values cannot make it grow) instead of parsed per request.
 */
const acceptances = new Map<string, Acceptance>()
const MAX_ACCEPTANCES = 64

const ACCEPTS_NOTHING: Acceptance = { json: false, sse: false }

function acceptance (accept: string | undefined): Acceptance {
  if (accept === undefined) return ACCEPTS_NOTHING
  let a = acceptances.get(accept)
  if (a === undefined) {
    const types = mediaTypes(accept)
    const any = types.includes('*/*')
    a = {
      json: any || types.includes('application/json') || types.includes('application/*'),
      sse: any || types.includes('text/event-stream') || types.includes('text/*')
    }
    if (acceptances.size >= MAX_ACCEPTANCES) acceptances.clear()
    acceptances.set(accept, a)
  }
  return a
}

/** For POST: the client must accept SSE, and should accept JSON (406). Returns whether it accepts only SSE. */
export function checkPostAccept (request: FastifyRequest, id: RequestId | null): boolean {
  const { json, sse } = acceptance(request.headers.accept)
  // Without SSE the server could not send progress or requests to the client; a client that
  // accepts only SSE gets every response as a stream.
  if (!sse) {
    throw new HttpRefusal(406, id, ErrorCode.ServerError, 'Not Acceptable: the client must accept application/json and text/event-stream')
  }
  return !json
}

/** For GET: the client must accept SSE (406). */
export function checkGetAccept (request: FastifyRequest): void {
  if (!acceptance(request.headers.accept).sse) {
    throw new HttpRefusal(406, null, ErrorCode.ServerError, 'Not Acceptable: the client must accept text/event-stream')
  }
}

/** For POST: the body must be JSON (415). */
export function checkContentType (request: FastifyRequest): void {
  const ct = request.headers['content-type']
  if (ct !== 'application/json' && ct?.split(';')[0].trim().toLowerCase() !== 'application/json') {
    throw new HttpRefusal(415, null, ErrorCode.InvalidRequest, 'Unsupported Media Type: Content-Type must be application/json')
  }
}
