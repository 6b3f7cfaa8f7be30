/**
 * The "In your app" example of docs/in-your-app.md (examples/in-your-app.ts), tested the way that page tells
 * users to test their tools: injectClient, no network.
 */
import t from 'tap'
import { injectClient } from '../../lib/index.js'
import { buildShop } from '../../examples/in-your-app.js'

t.test('the shop\'s tools, in-process', async (t) => {
  const app = await buildShop({ logger: false })
  t.teardown(() => app.close())
  const client = injectClient(app, { elicit: async () => ({ action: 'accept', content: { ok: true } }) })

  const added = await client.callTool('add_to_cart', { sku: 'tea', qty: 2 })
  t.same(added.structuredContent, { items: 1 })
  t.same((await client.callTool('add_to_cart', { sku: 'mug', qty: 1 })).structuredContent, { items: 2 }, 'the session keeps the cart')

  const unknown = await client.callTool('add_to_cart', { sku: 'cake', qty: 1 })
  t.equal(unknown.isError, true)
  t.match(unknown.content[0].text, /Unknown SKU "cake"/, 'the model reads why')

  const paid = await client.callTool('checkout')
  t.same(paid, { content: [{ type: 'text', text: 'Tool execution failed' }], isError: true }, 'the payment error stays internal')

  const declined = injectClient(app, { elicit: async () => ({ action: 'decline' }) })
  t.equal((await declined.callTool('checkout')).content[0].text, 'Checkout cancelled.')
})

t.test('the shop behind its proxy: forwarded requests and its CORS origin are allowed', async (t) => {
  const app = await buildShop({ logger: false })
  t.teardown(() => app.close())
  const viaProxy = injectClient(app, {
    headers: { host: 'shop.example.com', 'x-forwarded-for': '203.0.113.7', 'x-forwarded-host': 'shop.example.com', origin: 'https://shop.example.com' }
  })
  t.same((await viaProxy.callTool('add_to_cart', { sku: 'tea', qty: 1 })).structuredContent, { items: 1 })
  const elsewhere = injectClient(app, { headers: { origin: 'https://evil.example.com' } })
  await t.rejects(elsewhere.callTool('add_to_cart', { sku: 'tea', qty: 1 }), { status: 403, message: 'Forbidden: origin not allowed' })
})
