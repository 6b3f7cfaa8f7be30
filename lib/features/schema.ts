/**
 * JSON Schema validation for tool inputs and outputs. Schemas (TypeBox or plain JSON Schema) are
 * compiled once, when a tool is registered — never per request. JSON Schema 2020-12 is the default
 * dialect of MCP 2025-11-25, so the 2020 build of Ajv is used.
 */
import { Ajv2020 } from 'ajv/dist/2020.js'
import type { ErrorObject } from 'ajv'
import addFormatsModule from 'ajv-formats'

// ajv-formats is CommonJS; under NodeNext its default export arrives wrapped.
const addFormats = ((addFormatsModule as unknown as { default?: typeof addFormatsModule }).default ?? addFormatsModule) as unknown as (ajv: Ajv2020) => void

/** A compiled validator: `null` when valid, else a readable message. */
export type Validator = (value: unknown) => string | null

let shared: Ajv2020 | undefined
function ajv (): Ajv2020 {
  if (shared === undefined) {
    shared = new Ajv2020({ strict: false, allErrors: true, validateFormats: true, useDefaults: true })
    addFormats(shared)
  }
  return shared
}

function describe (errors: ErrorObject[] | null | undefined): string {
  return (errors ?? []).map(e => `${e.instancePath === '' ? '(root)' : e.instancePath} ${e.message ?? 'is invalid'}`).join('; ')
}

/** Compiles a schema; throws (at registration) when the schema itself is invalid. */
export function compile (schema: object): Validator {
  const validate = ajv().compile(toPlainSchema(schema))
  return (value) => validate(value) ? null : describe(validate.errors)
}

/**
 * A JSON copy of a schema: TypeBox adds symbol keys (ignored by JSON) and users may pass frozen
 * objects; what is listed on the wire is this plain copy.
 */
export function toPlainSchema (schema: object): Record<string, unknown> {
  return JSON.parse(JSON.stringify(schema)) as Record<string, unknown>
}
