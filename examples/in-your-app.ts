/**
 * The "In your app" page (docs/in-your-app.md) as one program (type-checked with the tests; the test
 * `test/app/in-your-app.test.ts` runs it): an existing shop app behind a reverse proxy on the same
 * machine, with CORS and a rate limit of its own, serving MCP under `/api/mcp`.
 *
 *   npx tsx examples/in-your-app.ts     # http://127.0.0.1:3000/api/mcp
 */
import Fastify, { type FastifyInstance } from 'fastify'
import cors from '@fastify/cors'
import rateLimit from '@fastify/rate-limit'
import { Type } from '@sinclair/typebox'
import mcp, { InternalToolError } from '../lib/index.js'

const catalog = new Map([['tea', 4], ['mug', 9]])

/** Stands in for a payment service that is down. */
async function charge (_amount: number): Promise<string> {
  throw new Error('connect ECONNREFUSED 10.0.4.7:8443')
}

export async function buildShop (opts: { logger?: boolean } = {}): Promise<FastifyInstance> {
  // trustProxy: the reverse proxy on this machine forwards the shop's traffic.
  const app = Fastify({ logger: opts.logger ?? true, trustProxy: '127.0.0.1' })

  // The app's own plugins, registered before the MCP plugin so their hooks run on its routes.
  await app.register(cors, {
    origin: ['https://shop.example.com'],          // the one list of origins
    methods: ['GET', 'POST', 'DELETE'],
    exposedHeaders: ['Mcp-Session-Id']
  })
  await app.register(rateLimit, { max: 100, timeWindow: 60_000 })

  await app.register(mcp, {
    prefix: '/api',                                 // POST/GET/DELETE /api/mcp
    serverInfo: { name: 'shop', version: '1.0.0' },
    allowedHosts: ['shop.example.com']              // the forwarded host the proxy may send
  })

  app.mcp.tool({
    name: 'add_to_cart',
    description: 'Adds an item to the cart of this session',
    input: Type.Object({ sku: Type.String(), qty: Type.Integer({ minimum: 1 }) }),
    output: Type.Object({ items: Type.Integer() })
  }, async ({ sku, qty }, ctx) => {
    // This message reaches the model verbatim: it can correct itself.
    if (!catalog.has(sku)) throw new Error(`Unknown SKU "${sku}"; known: ${[...catalog.keys()].join(', ')}`)
    const cart = ctx.session?.get<Array<{ sku: string, qty: number }>>('cart') ?? []
    cart.push({ sku, qty })
    ctx.session?.set('cart', cart)
    ctx.request.log.info({ sku, qty }, 'added to cart')   // carries mcpMethod, mcpTool, mcpSession…
    return { structuredContent: { items: cart.length } }
  })

  app.mcp.tool({
    name: 'checkout',
    description: 'Asks the user to confirm, then pays for the cart'
  }, async (_args, ctx) => {
    const cart = ctx.session?.get<Array<{ sku: string, qty: number }>>('cart') ?? []
    const total = cart.reduce((sum, item) => sum + (catalog.get(item.sku) ?? 0) * item.qty, 0)
    const answer = await ctx.elicit('confirm', {
      message: `Pay ${total} EUR?`,
      requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] }
    })
    if (answer.action !== 'accept' || answer.content?.ok !== true) return 'Checkout cancelled.'
    try {
      return `Paid: ${await charge(total)}`
    } catch (err) {
      // The model sees "Tool execution failed"; the cause goes to the log only.
      throw new InternalToolError('payment service failed', { cause: err })
    }
  })

  return app
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const app = await buildShop()
  await app.listen({ port: Number(process.env.PORT ?? 3000), host: '127.0.0.1' })
}
