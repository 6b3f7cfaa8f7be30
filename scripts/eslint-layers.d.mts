// The types of scripts/eslint-layers.mjs (the lint rule is plain JS: eslint.config.js loads it).
import type { Rule } from 'eslint'

/** The layers of lib/README.md's drawing, left to right: each a list of rooms (`protocol/`, `index.ts`). */
export function readLayers (readme?: string): string[][]

declare const rule: Rule.RuleModule
export default rule
