/**
 * RFC 6570 URI templates, as far as resource templates need them: matching a concrete URI against
 * a template to extract its variables. Supports simple (`{var}`), reserved (`{+var}`), fragment
 * (`{#var}`), label (`{.var}`), path (`{/var}`), and query (`{?a,b}`, `{&a}`) expressions.
 */

/** A template compiled for matching (`TemplateEntry.compiled`). */
export interface CompiledTemplate {
  regex: RegExp
  names: string[]
  query: string[]
}

const OPS: Record<string, { prefix: string, sep: string, char: string }> = {
  '': { prefix: '', sep: ',', char: '[^/?#,]' },
  '+': { prefix: '', sep: ',', char: '[^?#,]' },
  '#': { prefix: '#', sep: ',', char: '[^,]' },
  '.': { prefix: '\\.', sep: '\\.', char: '[^/?#.,]' },
  '/': { prefix: '/', sep: '/', char: '[^/?#,]' }
}

function escapeRegex (s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}

/** Compiles a template; throws on syntax errors (at registration). */
export function compileTemplate (template: string): CompiledTemplate {
  const names: string[] = []
  const query: string[] = []
  let pattern = '^'
  let last = 0
  const re = /\{([^{}]*)\}/g
  let m: RegExpExecArray | null
  while ((m = re.exec(template)) !== null) {
    pattern += escapeRegex(template.slice(last, m.index))
    last = m.index + m[0].length
    let expr = m[1]
    let op = ''
    if (expr.length > 0 && '+#./?&'.includes(expr[0])) { op = expr[0]; expr = expr.slice(1) }
    const vars = expr.split(',').map(v => v.replace(/\*$/, '').replace(/:\d+$/, ''))
    if (vars.some(v => !/^[A-Za-z0-9_]+$/.test(v))) throw new Error(`invalid expression {${m[1]}}`)
    if (op === '?' || op === '&') {
      query.push(...vars)
      // Query expressions are matched loosely: the query string is parsed after the regex match.
      pattern += '(?:[?&][^#]*)?'
      continue
    }
    const { prefix, sep, char } = OPS[op]
    const parts = vars.map((v) => { names.push(v); return `(${char}*)` })
    // RFC 6570 §3.2.1: an undefined variable expands to nothing, prefix included (`{/path}` → "").
    if (prefix === '') pattern += parts.join(sep)
    else if (prefix === sep) pattern += parts.map(p => `(?:${prefix}${p})?`).join('')
    else pattern += `(?:${prefix}${parts.join(sep)})?`
  }
  pattern += escapeRegex(template.slice(last)) + '$'
  if (/[{}]/.test(template.slice(last))) throw new Error('unbalanced braces')
  return { regex: new RegExp(pattern), names, query }
}

/** Matches a URI; returns the decoded variables, or `null` when it does not match. */
export function matchTemplate (compiled: CompiledTemplate, uri: string): Record<string, string> | null {
  const m = compiled.regex.exec(uri)
  if (m === null) return null
  const vars: Record<string, string> = {}
  try {
    compiled.names.forEach((name, i) => { if (m[i + 1] !== undefined) vars[name] = decodeURIComponent(m[i + 1]) })
    if (compiled.query.length > 0) {
      const q = uri.indexOf('?')
      if (q !== -1) {
        const params = new URLSearchParams(uri.slice(q + 1).split('#')[0])
        for (const name of compiled.query) {
          const v = params.get(name)
          if (v !== null) vars[name] = v
        }
      }
    }
  } catch {
    return null // malformed percent-encoding: not a match
  }
  return vars
}
