/**
 * Tool schemas: what `input` / `output` accept, how the handler's types are inferred from them,
 * and how they are compiled (once, when a tool is registered; never per request).
 *
 * Three kinds of schema, told apart at registration:
 * - **Standard Schema** (zod ≥ 4.2, ArkType 2.2, Valibot through `toStandardJsonSchema`, …): an
 *   object (or a function: ArkType's types are callable) with `~standard.validate`. Values are
 *   checked by the schema's own validator (its refinements, defaults and transforms apply, and the
 *   handler gets the parsed value its type promises); the JSON Schema that tools/list advertises
 *   comes from the schema's Standard JSON Schema converter (`~standard.jsonSchema`). A Standard
 *   Schema without a converter is refused: the plugin has no way to advertise it.
 * - **JSON Schema** (2020-12, the default dialect of MCP), TypeBox's included (any version: its
 *   schemas are JSON Schema): checked by Ajv, advertised as a plain JSON copy. Anything that is not
 *   plain JSON data (a class instance, a function: a schema of another library) is refused rather
 *   than advertised as its JSON text and never checked.
 *
 * The types are structural: nothing here imports TypeBox, zod or a Standard Schema package, so
 * the plugin's declarations type-check whichever of them (and whichever version) an app has.
 */
import { Ajv2020 } from 'ajv/dist/2020.js'
import type { ErrorObject } from 'ajv'
import addFormatsModule from 'ajv-formats'
import { echoed } from '../jsonrpc/errors.js'

// ajv-formats is CommonJS; under NodeNext its default export arrives wrapped.
const addFormats = ((addFormatsModule as unknown as { default?: typeof addFormatsModule }).default ?? addFormatsModule) as unknown as (ajv: Ajv2020) => void

// ---------------------------------------------------------------------------------------------
// Standard Schema v1 and Standard JSON Schema v1 (https://standardschema.dev), the parts read
// here. Inlined, as the spec recommends, so that no package is needed for them.

/** A Standard Schema v1 (`~standard` with `validate`), optionally with a Standard JSON Schema converter. */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  readonly '~standard': StandardSchemaV1Props<Input, Output>
}

export interface StandardSchemaV1Props<Input = unknown, Output = Input> {
  readonly version: 1
  readonly vendor: string
  readonly validate: (value: unknown, options?: { readonly libraryOptions?: Record<string, unknown> | undefined } | undefined) =>
  StandardResult<Output> | Promise<StandardResult<Output>>
  readonly types?: { readonly input: Input, readonly output: Output } | undefined
  /** Standard JSON Schema v1: how the schema describes itself as JSON Schema. */
  readonly jsonSchema?: StandardJsonSchemaConverter | undefined
}

export interface StandardJsonSchemaConverter {
  readonly input: (options: { readonly target: string, readonly libraryOptions?: Record<string, unknown> | undefined }) => Record<string, unknown>
  readonly output: (options: { readonly target: string, readonly libraryOptions?: Record<string, unknown> | undefined }) => Record<string, unknown>
}

export type StandardResult<Output> =
  | { readonly value: Output, readonly issues?: undefined }
  | { readonly issues: ReadonlyArray<{ readonly message: string, readonly path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined }> }

// ---------------------------------------------------------------------------------------------
// Types

/**
 * What `input` and `output` take: a Standard Schema, a TypeBox schema (0.33, 0.34 or 1.x) or a
 * plain JSON Schema object. Checked at registration (`FST_ERR_MCP_INVALID_DEFINITION`).
 */
export type ToolSchema = object

type Depth = [never, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
type Simplify<T> = { [K in keyof T]: T[K] } & {}
type UnionToIntersection<U> = (U extends unknown ? (x: U) => void : never) extends (x: infer I) => void ? I : never

/**
 * The TypeScript type a JSON Schema describes, read from its literal shape: `type` (or a list of
 * types), `properties` + `required`, `items` (an array, or a tuple), `prefixItems`, `enum`,
 * `const`, `anyOf` / `oneOf` (union), `allOf` (intersection), `patternProperties` and
 * `additionalProperties` (records). This is how TypeBox 1.x schemas are typed (their types are
 * these shapes) and how `as const` JSON Schema literals are; what it cannot read is `unknown`.
 */
export type FromJsonSchema<S, D extends number = 10> =
  [D] extends [never] ? unknown
    : S extends { readonly '~unsafe': infer T } ? T // TypeBox 1.x Type.Unsafe<T>
      : S extends { readonly '~kind': 'Any' } ? any
        : S extends { readonly const: infer C } ? C
          : S extends { readonly enum: ReadonlyArray<infer E> } ? E
            : S extends { readonly anyOf: ReadonlyArray<infer U> } ? FromJsonSchema<U, Depth[D]>
              : S extends { readonly oneOf: ReadonlyArray<infer U> } ? FromJsonSchema<U, Depth[D]>
                : S extends { readonly allOf: infer A extends readonly unknown[] } ? UnionToIntersection<{ [K in keyof A]: FromJsonSchema<A[K], Depth[D]> }[number]>
                  : S extends { readonly type: infer T } ? FromTypeName<T, S, Depth[D]>
                    : unknown

type FromTypeName<T, S, D extends number> =
  T extends ReadonlyArray<infer E> ? FromTypeName<E, S, D>
    : T extends 'string' ? string
      : T extends 'number' | 'integer' ? number
        : T extends 'boolean' ? boolean
          : T extends 'null' ? null
            : T extends 'array' ? FromArraySchema<S, D>
              : T extends 'object' ? FromObjectSchema<S, D>
                : unknown

type FromArraySchema<S, D extends number> =
  S extends { readonly prefixItems: infer P extends readonly unknown[] } ? { -readonly [K in keyof P]: FromJsonSchema<P[K], D> }
    : S extends { readonly items: infer P extends readonly unknown[] } ? { -readonly [K in keyof P]: FromJsonSchema<P[K], D> }
      : S extends { readonly items: infer I } ? Array<FromJsonSchema<I, D>>
        : unknown[]

type RequiredKeys<S> = S extends { readonly required: ReadonlyArray<infer K> } ? K : never

type FromObjectSchema<S, D extends number> =
  S extends { readonly properties: infer P extends object }
    ? Simplify<
    { -readonly [K in keyof P as K extends RequiredKeys<S> ? K : never]: FromJsonSchema<P[K], D> } &
    { -readonly [K in keyof P as K extends RequiredKeys<S> ? never : K]?: FromJsonSchema<P[K], D> }>
    : S extends { readonly patternProperties: infer P extends object } ? Record<string, FromJsonSchema<P[keyof P], D>>
      : S extends { readonly additionalProperties: infer A } ? (A extends boolean ? Record<string, unknown> : Record<string, FromJsonSchema<A, D>>)
        : Record<string, unknown>

/** Whether `S` carries a type the handler's types can be inferred from. */
type Typed<S> =
  S extends { readonly '~standard': { readonly types?: infer T } } ? ([NonNullable<T>] extends [never] ? false : true)
    : S extends { readonly static: unknown, readonly params: unknown[] } ? true // TypeBox 0.x
      : S extends { readonly '~kind': string } ? true // TypeBox 1.x
        : S extends { readonly type: 'object' } ? true // a JSON Schema literal (`as const`)
          : false

/**
 * The static type of a schema, on the side `side`: `'output'` is what a value is after it passed
 * (the handler's arguments: a Standard Schema's output type, with its transforms and defaults),
 * `'input'` what a value must be to pass (a tool's `structuredContent`). TypeBox 0.x schemas carry
 * their type (`static`), TypeBox 1.x and `as const` JSON Schema are read by {@link FromJsonSchema}.
 */
export type SchemaStatic<S, Side extends 'input' | 'output' = 'output'> =
  S extends { readonly '~standard': { readonly types?: infer T } } ? NonNullable<T> extends { readonly input: infer In, readonly output: infer Out } ? (Side extends 'input' ? In : Out) : unknown
    : S extends { readonly static: unknown, readonly params: unknown[] } ? (S & { params: [] })['static']
      : FromJsonSchema<S>

/**
 * The arguments a tool handler receives: inferred from a typed `input` (Standard Schema, TypeBox,
 * an `as const` JSON Schema), else (no `input`, or a JSON Schema the types cannot read) a record.
 */
export type ToolArgs<I> = [I] extends [undefined] ? Record<string, unknown>
  : Typed<I> extends true ? SchemaStatic<I, 'output'> : Record<string, unknown>

/** The `structuredContent` a tool with `output` returns: its type where the schema has one, else any JSON value. */
export type ToolStructured<O> = Typed<O> extends true ? SchemaStatic<O, 'input'> : unknown

// ---------------------------------------------------------------------------------------------
// Runtime

/** The outcome of a check: the value to use (a Standard Schema may have parsed it), or a readable problem. */
export type Checked = { readonly ok: true, readonly value: unknown } | { readonly ok: false, readonly problem: string }

/** A compiled validator; a Standard Schema's may answer asynchronously. */
export type Validator = (value: unknown) => Checked | Promise<Checked>

/** A compiled schema: the JSON Schema advertised, and its validator. */
export interface CompiledSchema {
  json: Record<string, unknown>
  validate: Validator
}

/**
 * Schemas one Ajv compiles before a fresh one takes the next. Ajv keeps what it compiled for its
 * own lifetime (its scope holds every validator function, and the cache every schema): with one
 * Ajv for the process, each registration or `update()` of a tool grew the heap for good. A
 * validator holds its Ajv, so a retired Ajv is collected once the definitions compiled by it are
 * removed or replaced; at most this many compiled schemas are kept beyond those in use per Ajv
 * that a live definition holds.
 */
const COMPILES_PER_AJV = 128

let current: { ajv: Ajv2020, compiles: number } | undefined
function newAjv (): Ajv2020 {
  // Not `allErrors`: with it, arguments that break one rule many times make an error object for
  // each, so a body within the default bodyLimit could take many times its size in heap and make
  // a message listing every one. The first problem found tells the client what to fix.
  const ajv = new Ajv2020({ strict: false, validateFormats: true, useDefaults: true })
  addFormats(ajv)
  return ajv
}
function ajv (): Ajv2020 {
  current ??= { ajv: newAjv(), compiles: 0 }
  return current.ajv
}

/** The Ajv a compile goes to, counted (see {@link COMPILES_PER_AJV}). */
function ajvForCompile (): Ajv2020 {
  if (current === undefined || current.compiles >= COMPILES_PER_AJV) current = { ajv: newAjv(), compiles: 0 }
  current.compiles++
  return current.ajv
}

/** The most problems of a value that a message lists (a Standard Schema reports them all). */
const MAX_LISTED_PROBLEMS = 10
/** The most characters of one listed problem: its path holds the client's keys, its message may quote the value. */
const MAX_PROBLEM_LENGTH = 256

/**
 * Problems as one message: `first`, the first {@link MAX_LISTED_PROBLEMS} (or fewer) of `total`,
 * each cut to a bound, then how many more.
 */
function listProblems (first: readonly string[], total: number): string {
  const more = total - first.length
  return first.map(p => echoed(p, MAX_PROBLEM_LENGTH)).join('; ') + (more > 0 ? `; and ${more} more` : '')
}

function describe (errors: ErrorObject[] | null | undefined): string {
  const all = errors ?? []
  return listProblems(all.slice(0, MAX_LISTED_PROBLEMS).map(e => `${e.instancePath === '' ? '(root)' : e.instancePath} ${e.message ?? 'is invalid'}`), all.length)
}

/** Compiles a JSON Schema with Ajv; throws (at registration) when the schema itself is invalid. */
export function compile (schema: object): (value: unknown) => string | null {
  const instance = ajvForCompile()
  const plain = toPlainSchema(schema)
  let validate
  try {
    validate = instance.compile(plain)
  } finally {
    // Out of the cache and the `$id` table at once (an invalid schema too): the validator keeps
    // what it needs, and a definition re-registered with the same `$id` compiles again rather
    // than clashing with its former self.
    instance.removeSchema(plain)
  }
  return (value) => validate(value) ? null : describe(validate.errors)
}

/**
 * A JSON copy of a schema: TypeBox adds symbol keys (ignored by JSON) and users may pass frozen
 * objects; what is listed on the wire is this plain copy.
 */
export function toPlainSchema (schema: object): Record<string, unknown> {
  return JSON.parse(JSON.stringify(schema)) as Record<string, unknown>
}

/** Whether `value` has a Standard Schema v1 `~standard.validate`. */
export function isStandardSchema (value: unknown): value is StandardSchemaV1 {
  if ((typeof value !== 'object' && typeof value !== 'function') || value === null) return false
  const props = (value as { '~standard'?: unknown })['~standard'] as Partial<StandardSchemaV1Props> | undefined
  return typeof props === 'object' && props !== null && typeof props.validate === 'function'
}

/**
 * Where `value` stops being JSON data (`null` when it is): a class instance, a function, a
 * `toJSON` hook, a non-finite number, `undefined`. Symbol keys are ignored (TypeBox 0.x adds them).
 */
function notJson (value: unknown, path: string, seen: Set<object>): string | null {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return null
  if (typeof value === 'number') return Number.isFinite(value) ? null : `${path} is not a finite number`
  if (typeof value !== 'object') return `${path} is ${typeof value === 'function' ? 'a function' : typeof value}`
  if (seen.has(value)) return `${path} is a cycle`
  seen.add(value)
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const problem = notJson(value[i], `${path}/${i}`, seen)
      if (problem !== null) return problem
    }
  } else {
    const proto = Object.getPrototypeOf(value) as unknown
    if (proto !== Object.prototype && proto !== null) return `${path} is an instance of ${(value.constructor as { name?: string } | undefined)?.name ?? 'a class'}, not a JSON object`
    if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return `${path} has a toJSON method`
    for (const key of Object.keys(value)) {
      const problem = notJson((value as Record<string, unknown>)[key], `${path}/${key}`, seen)
      if (problem !== null) return problem
    }
  }
  seen.delete(value)
  return null
}

function issuePath (path: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined): string {
  if (path === undefined || path.length === 0) return '(root)'
  return path.map(p => `/${String(typeof p === 'object' && p !== null ? p.key : p)}`).join('')
}

function fromStandard (result: StandardResult<unknown>): Checked {
  if (result.issues === undefined) return { ok: true, value: result.value }
  const problem = listProblems(result.issues.slice(0, MAX_LISTED_PROBLEMS).map(i => `${issuePath(i.path)} ${i.message}`), result.issues.length)
  return { ok: false, problem: problem === '' ? 'is invalid' : problem }
}

/** A Standard Schema validator that threw: its message (which may quote the value), cut to a bound. */
function failedValidation (err: unknown): string {
  return `validation failed: ${echoed(String((err as Error)?.message ?? err), MAX_PROBLEM_LENGTH)}`
}

function standardValidator (schema: StandardSchemaV1): Validator {
  const validate = schema['~standard'].validate
  return (value) => {
    let result: StandardResult<unknown> | Promise<StandardResult<unknown>>
    try {
      result = validate(value)
    } catch (err) {
      return { ok: false, problem: failedValidation(err) }
    }
    // Any thenable (not only a native Promise) is awaited: read synchronously, it would pass.
    return typeof (result as { then?: unknown }).then === 'function'
      ? Promise.resolve(result).then(fromStandard, (err: unknown) => ({ ok: false, problem: failedValidation(err) }))
      : fromStandard(result as StandardResult<unknown>)
  }
}

/**
 * Compiles a tool's `input` or `output` (`side`). Throws an `Error` whose message says what is
 * wrong; the registry turns it into `FST_ERR_MCP_INVALID_DEFINITION`.
 */
export function compileSchema (schema: unknown, side: 'input' | 'output'): CompiledSchema {
  // A Standard Schema may be a function (ArkType's types are callable).
  if (isStandardSchema(schema)) {
    const props = schema['~standard']
    const convert = props.jsonSchema?.[side]
    if (typeof convert !== 'function') {
      throw new Error(`${side} is a Standard Schema (vendor "${String(props.vendor)}") without a JSON Schema converter ` +
        '(Standard JSON Schema, `~standard.jsonSchema`), so it could not be advertised in tools/list: use a version that has one ' +
        '(zod ≥ 4.2, ArkType 2.2, Valibot through toStandardJsonSchema() of @valibot/to-json-schema), or pass a JSON Schema')
    }
    let json: unknown
    try {
      json = convert({ target: 'draft-2020-12' })
    } catch (err) {
      throw new Error(`${side}: the ${String(props.vendor)} schema cannot be converted to JSON Schema: ${(err as Error)?.message ?? String(err)}`)
    }
    const problem = notJson(json, '(root)', new Set())
    if (problem !== null || typeof json !== 'object' || json === null || Array.isArray(json)) {
      throw new Error(`${side}: the JSON Schema of the ${String(props.vendor)} schema is not plain JSON: ${problem ?? 'not an object'}`)
    }
    const plain = toPlainSchema(json)
    if (!ajv().validateSchema(plain)) throw new Error(`${side}: the JSON Schema of the ${String(props.vendor)} schema is invalid: ${ajv().errorsText(ajv().errors)}`)
    return { json: plain, validate: standardValidator(schema) }
  }
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) {
    throw new Error(`${side} must be a JSON Schema object, a TypeBox schema or a Standard Schema (got ${Array.isArray(schema) ? 'an array' : schema === null ? 'null' : typeof schema})`)
  }
  const problem = notJson(schema, '(root)', new Set())
  if (problem !== null) {
    throw new Error(`${side} must be a JSON Schema (plain JSON data), a TypeBox schema or a Standard Schema with a JSON Schema converter: ${problem}`)
  }
  const json = toPlainSchema(schema)
  const check = compile(json)
  return {
    json,
    validate: (value) => {
      const problem = check(value)
      return problem === null ? { ok: true, value } : { ok: false, problem }
    }
  }
}
