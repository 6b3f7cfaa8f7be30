// Lint in the Fastify organisation's style for TypeScript: neostandard (standard, with
// typescript-eslint). The stylistic rules stay on: the code already follows standard's style.
import neostandard from 'neostandard'
import layers from './scripts/eslint-layers.mjs'

export default [
  ...neostandard({ ts: true, ignores: ['dist/**', 'coverage/**', '.tap/**', 'bench/.build/**', 'bench/.build-before/**', '.quick/**'] }),
  {
    rules: {
      // `void promise;` marks a promise deliberately left unawaited (its errors handled on it);
      // `void` as an expression stays an error.
      'no-void': ['error', { allowAsStatement: true }],
      // A line fits a side-by-side diff: the code mostly stays well under 200 (a URL or a regular
      // expression may not be broken).
      '@stylistic/max-len': ['error', { code: 200, ignoreUrls: true, ignoreRegExpLiterals: true }]
    }
  },
  {
    // Imports in lib/ point down lib/README.md's layers (scripts/eslint-layers.mjs).
    files: ['lib/**/*.ts'],
    plugins: { local: { rules: { layers } } },
    rules: { 'local/layers': 'error' }
  }
]
