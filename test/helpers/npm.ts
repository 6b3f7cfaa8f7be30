/**
 * Running npm, node and tsc as a user's project would, for the package tests: the repository's
 * root, the version of a package it has installed (a consumer installs the same, from the cache),
 * and child processes with none of the test runner's or the parent npm's settings.
 */
import { execFile } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..')
export const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc')

/** Version of a package in the repo's node_modules. */
export const versionOf = async (name: string): Promise<string> =>
  (JSON.parse(await readFile(join(ROOT, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version

/** Environment for npm and node children: none of the test runner's or the parent npm's settings. */
export function childEnv (): NodeJS.ProcessEnv {
  const env = { ...process.env }
  for (const key of Object.keys(env)) {
    if (key === 'NODE_OPTIONS' || key === 'NODE_V8_COVERAGE' || key.startsWith('_TAPJS_') || key.startsWith('TAP_') ||
      /^npm_(package_|lifecycle_|command$|config_local_prefix$|config_prefix$)/i.test(key)) delete env[key]
  }
  return env
}

export interface Run { code: number, stdout: string, stderr: string }

/** Runs a command to its end; `code` is its exit code (1 when it could not run or timed out). */
export async function run (cmd: string, args: string[], cwd: string, timeout = 180_000): Promise<Run> {
  return await new Promise((resolve) => {
    execFile(cmd, args, { cwd, env: childEnv(), timeout, maxBuffer: 64 * 1024 * 1024, shell: process.platform === 'win32' },
      (err, stdout, stderr) => {
        resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : 1, stdout, stderr })
      })
  })
}

/** Runs a command; rejects with everything it printed when it exits non-zero. */
export async function mustRun (cmd: string, args: string[], cwd: string, timeout = 180_000): Promise<Run> {
  const r = await run(cmd, args, cwd, timeout)
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')} (in ${cwd}) failed (exit ${r.code})\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`)
  return r
}
