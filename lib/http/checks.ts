/**
 * Request checks that run before any MCP processing: Origin allow-list and the Host check that
 * protects loopback binds from DNS rebinding (403), Content-Type (415), Accept (406).
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import { ErrorCode, type RequestId } from '../jsonrpc/errors.js'
import type { ResolvedOptions } from '../options.js'
import { HttpRefusal } from './refusal.js'

function isLoopbackAddress (addr: string | undefined): boolean {
  if (addr === undefined) return true // app.inject(): no socket address
  return addr === '::1' || addr.startsWith('127.') || addr.startsWith('::ffff:127.')
}

/**
 * Whether the app's CORS plugin approved `origin` for this request: it ran in a hook before the
 * route and echoed the origin in `Access-Control-Allow-Origin`. A `*` approves no origin in
 * particular (it is what `@fastify/cors` sends by default) and does not count.
 */
function approvedByCors (reply: FastifyReply, origin: string): boolean {
  return reply.getHeader('access-control-allow-origin') === origin
}

/**
 * Whether the request was forwarded by a proxy the app trusts (Fastify's `trustProxy`): the peer
 * is trusted and sent `X-Forwarded-For` (then `request.ips` holds more than the peer), or an
 * `X-Forwarded-Host` that Fastify took as `request.host`.
 */
function forwardedByTrustedProxy (request: FastifyRequest): boolean {
  // `ips` is a property only when the app sets trustProxy: without it the headers are not read
  // (two lookups in the headers object, which is in dictionary mode, per request).
  if (!('ips' in request)) return false
  const h = request.headers
  if (h['x-forwarded-for'] === undefined && h['x-forwarded-host'] === undefined) return false
  const ips = request.ips
  if (ips === undefined) return false
  if (ips.length > 1) return true
  return h['x-forwarded-host'] !== undefined && request.host !== h.host
}

/**
 * 403 for a present Origin that neither `allowedOrigins` nor the app's CORS plugin allows, or for
 * a Host outside `allowedHosts` on a loopback connection (DNS rebinding). A request a trusted proxy
 * forwarded is not held to the loopback Host list; with `allowedHosts` configured its forwarded
 * host (`request.host`) is checked against it. Why that keeps a loopback-only server safe from
 * DNS rebinding: docs/in-your-app.md, "Behind a proxy".
 */
export function checkOrigin (request: FastifyRequest, reply: FastifyReply, opts: ResolvedOptions): void {
  const origin = request.headers.origin
  if (origin !== undefined && !opts.allowedOrigins(origin) && !approvedByCors(reply, origin)) {
    throw new HttpRefusal(403, null, ErrorCode.InvalidRequest, 'Forbidden: origin not allowed')
  }
  if (isLoopbackAddress(request.socket?.localAddress)) {
    if (forwardedByTrustedProxy(request)) {
      if (opts.forwardedHosts !== null && !opts.forwardedHosts(request.host)) {
        throw new HttpRefusal(403, null, ErrorCode.InvalidRequest, 'Forbidden: host not allowed')
      }
      return
    }
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

/**
 * The last value looked up, in front of the map: a string compare, where a map lookup hashes the
 * header's string (a new one per request) first.
 */
let lastAccept = ''
let lastAcceptance = ACCEPTS_NOTHING

function acceptance (accept: string | undefined): Acceptance {
  if (accept === undefined) return ACCEPTS_NOTHING
  if (accept === lastAccept) return lastAcceptance
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
  lastAccept = accept
  lastAcceptance = a
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
