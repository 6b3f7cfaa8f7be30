/**
 * Compiles lib/ and bench/servers/ to JavaScript in bench/.build/ (TypeScript's own transpiler,
 * the project's compiler options, one file at a time as `isolatedModules` allows), so the servers
 * run as plain Node.js on what `npm run build` would ship — not through tsx, whose loader and
 * `keepNames` helpers (`__name(…)` on every closure) would be measured with the plugin.
 */
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { dirname, join, relative } from 'node:path'
import ts from 'typescript'
import { ROOT } from './harness.js'

export const BUILD_DIR = join(ROOT, 'bench', '.build')

async function sources (dir: string): Promise<string[]> {
  const out: string[] = []
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) out.push(...await sources(path))
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) out.push(path)
  }
  return out
}

/**
 * Transpiles lib/ and bench/servers/ into `BUILD_DIR`; returns the number of files. With
 * `beforeRoot` (`--before <checkout>`): that checkout's lib/ with this tree's bench/servers/ into
 * bench/.build-before, so the same servers run on the code before a change.
 */
export async function buildServers (beforeRoot?: string): Promise<number> {
  const outDir = beforeRoot === undefined ? BUILD_DIR : join(ROOT, 'bench', '.build-before')
  const libRoot = beforeRoot ?? ROOT
  const configPath = join(ROOT, 'tsconfig.json')
  const read = ts.readConfigFile(configPath, ts.sys.readFile)
  if (read.error !== undefined) throw new Error(ts.flattenDiagnosticMessageText(read.error.messageText, '\n'))
  const parsed = ts.parseJsonConfigFileContent(read.config, ts.sys, ROOT)
  // ESM output whatever the file's package scope looks like to a single-file transpile (the
  // project is "type": "module"; NodeNext would otherwise fall back to CommonJS here).
  const compilerOptions: ts.CompilerOptions = {
    ...parsed.options,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    rootDir: undefined, // one file at a time; a --before checkout lies outside ROOT
    outDir: undefined,
    declaration: false,
    declarationMap: false,
    sourceMap: false,
    noEmit: false
  }
  await rm(outDir, { recursive: true, force: true })
  const files = [...await sources(join(libRoot, 'lib')), ...await sources(join(ROOT, 'bench', 'servers'))]
  for (const file of files) {
    const rel = relative(file.startsWith(join(libRoot, 'lib')) ? libRoot : ROOT, file)
    const out = ts.transpileModule(await readFile(file, 'utf8'), { compilerOptions, fileName: file, reportDiagnostics: true })
    const errors = (out.diagnostics ?? []).filter(d => d.category === ts.DiagnosticCategory.Error)
    if (errors.length > 0) throw new Error(`${rel}: ${ts.flattenDiagnosticMessageText(errors[0]?.messageText ?? '', '\n')}`)
    const target = join(outDir, rel.replace(/\.ts$/, '.js'))
    await mkdir(dirname(target), { recursive: true })
    await writeFile(target, out.outputText)
  }
  // The build is ESM like the project (package.json "type": "module" above it applies).
  return files.length
}
