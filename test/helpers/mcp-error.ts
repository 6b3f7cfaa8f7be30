/** The `McpError` a promise rejects with (anything else, or a resolution, fails the test). */
import { McpError } from '../../lib/index.js'

export async function mcpErrorOf (p: Promise<unknown>): Promise<McpError> {
  try {
    await p
  } catch (err) {
    if (err instanceof McpError) return err
    throw err
  }
  throw new Error('expected the call to fail with an McpError')
}
