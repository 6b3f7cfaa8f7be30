/**
 * A small SVG chart writer for docs/performance.md (no dependency): line charts (a series per
 * line, x and y linear) and grouped bar charts. Text is escaped; colours come from a fixed
 * palette so regenerated charts keep the same look.
 */

const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b']
const W = 640
const H = 320
const M = { left: 64, right: 16, top: 36, bottom: 48 }

export interface Series { name: string, points: Array<[x: number, y: number]> }
export interface LineChart { title: string, xLabel: string, yLabel: string, series: Series[], yMin?: number, steps?: boolean, marks?: Array<{ x: number, label: string }> }
export interface BarChart { title: string, yLabel: string, groups: string[], series: Array<{ name: string, values: number[] }> }

function esc (s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;')
}

/** Round tick values covering [lo, hi]. */
function ticks (lo: number, hi: number, n = 5): number[] {
  if (!(hi > lo)) hi = lo + 1
  const raw = (hi - lo) / n
  const mag = 10 ** Math.floor(Math.log10(raw))
  const step = [1, 2, 2.5, 5, 10].map(f => f * mag).find(s => s >= raw) ?? raw
  const out: number[] = []
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)))
  return out
}

const fmt = (v: number): string => Math.abs(v) >= 10_000 ? `${Math.round(v / 1000)}k` : String(Number(v.toPrecision(4)))

function frame (title: string, yLabel: string, xLabel: string, body: string[], legend: string[]): string {
  const legendItems = legend.map((name, i) =>
    `<g transform="translate(${M.left + 8 + (i % 3) * 190},${M.top + 12 + Math.floor(i / 3) * 16})"><rect width="10" height="10" y="-9" fill="${PALETTE[i % PALETTE.length]}"/>` +
      `<text x="14" font-size="11">${esc(name)}</text></g>`)
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" font-family="sans-serif">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    `<text x="${W / 2}" y="20" text-anchor="middle" font-size="14">${esc(title)}</text>`,
    `<text x="14" y="${(M.top + H - M.bottom) / 2}" font-size="11" text-anchor="middle" transform="rotate(-90 14 ${(M.top + H - M.bottom) / 2})">${esc(yLabel)}</text>`,
    `<text x="${(M.left + W - M.right) / 2}" y="${H - 8}" font-size="11" text-anchor="middle">${esc(xLabel)}</text>`,
    ...body,
    ...legendItems,
    '</svg>',
    ''
  ].join('\n')
}

/** A line chart of every series over shared linear axes. */
export function lineChart (c: LineChart): string {
  const xs = c.series.flatMap(s => s.points.map(p => p[0]))
  const ys = c.series.flatMap(s => s.points.map(p => p[1])).filter(Number.isFinite)
  const x0 = Math.min(...xs); const x1 = Math.max(...xs)
  const yt = ticks(c.yMin ?? Math.min(0, ...ys), Math.max(...ys) * 1.05)
  const y0 = yt[0] as number; const y1 = yt[yt.length - 1] as number
  const px = (x: number): number => M.left + (x1 === x0 ? 0 : (x - x0) / (x1 - x0)) * (W - M.left - M.right)
  const py = (y: number): number => H - M.bottom - (y - y0) / (y1 - y0 || 1) * (H - M.top - M.bottom)
  const body: string[] = []
  for (const v of yt) {
    body.push(`<line x1="${M.left}" x2="${W - M.right}" y1="${py(v).toFixed(1)}" y2="${py(v).toFixed(1)}" stroke="#ddd"/>` +
    `<text x="${M.left - 6}" y="${(py(v) + 4).toFixed(1)}" font-size="10" text-anchor="end">${fmt(v)}</text>`)
  }
  for (const v of ticks(x0, x1, 6)) body.push(`<text x="${px(v).toFixed(1)}" y="${H - M.bottom + 14}" font-size="10" text-anchor="middle">${fmt(v)}</text>`)
  for (const m of c.marks ?? []) {
    body.push(`<line x1="${px(m.x).toFixed(1)}" x2="${px(m.x).toFixed(1)}" y1="${M.top}" y2="${H - M.bottom}" stroke="#888" stroke-dasharray="4 3"/>` +
    `<text x="${(px(m.x) + 4).toFixed(1)}" y="${M.top + 44}" font-size="10">${esc(m.label)}</text>`)
  }
  c.series.forEach((s, i) => {
    const colour = PALETTE[i % PALETTE.length] as string
    const pts = s.points.filter(p => Number.isFinite(p[1]))
    let d = ''
    pts.forEach(([x, y], k) => {
      if (k === 0) d += `M${px(x).toFixed(1)},${py(y).toFixed(1)}`
      else if (c.steps === true) d += `H${px(x).toFixed(1)}V${py(y).toFixed(1)}`
      else d += `L${px(x).toFixed(1)},${py(y).toFixed(1)}`
    })
    body.push(`<path d="${d}" fill="none" stroke="${colour}" stroke-width="2"/>`)
    if (c.steps !== true) for (const [x, y] of pts) body.push(`<circle cx="${px(x).toFixed(1)}" cy="${py(y).toFixed(1)}" r="3" fill="${colour}"/>`)
  })
  body.push(`<line x1="${M.left}" x2="${M.left}" y1="${M.top}" y2="${H - M.bottom}" stroke="#000"/><line x1="${M.left}" x2="${W - M.right}" y1="${H - M.bottom}" y2="${H - M.bottom}" stroke="#000"/>`)
  return frame(c.title, c.yLabel, c.xLabel, body, c.series.map(s => s.name))
}

/** Bars per group, one per series, from zero. */
export function barChart (c: BarChart): string {
  const all = c.series.flatMap(s => s.values).filter(Number.isFinite)
  const yt = ticks(0, Math.max(...all, 0) * 1.1)
  const y1 = yt[yt.length - 1] as number
  const py = (y: number): number => H - M.bottom - y / (y1 || 1) * (H - M.top - M.bottom)
  const groupW = (W - M.left - M.right) / Math.max(1, c.groups.length)
  const barW = groupW * 0.7 / Math.max(1, c.series.length)
  const body: string[] = []
  for (const v of yt) {
    body.push(`<line x1="${M.left}" x2="${W - M.right}" y1="${py(v).toFixed(1)}" y2="${py(v).toFixed(1)}" stroke="#ddd"/>` +
    `<text x="${M.left - 6}" y="${(py(v) + 4).toFixed(1)}" font-size="10" text-anchor="end">${fmt(v)}</text>`)
  }
  c.groups.forEach((g, gi) => {
    const gx = M.left + gi * groupW + groupW * 0.15
    body.push(`<text x="${(M.left + (gi + 0.5) * groupW).toFixed(1)}" y="${H - M.bottom + 14}" font-size="10" text-anchor="middle">${esc(g)}</text>`)
    c.series.forEach((s, si) => {
      const v = s.values[gi] ?? NaN
      if (!Number.isFinite(v)) return
      const x = gx + si * barW
      body.push(`<rect x="${x.toFixed(1)}" y="${py(v).toFixed(1)}" width="${(barW - 2).toFixed(1)}" height="${(py(0) - py(v)).toFixed(1)}" fill="${PALETTE[si % PALETTE.length]}"/>` +
        `<text x="${(x + barW / 2).toFixed(1)}" y="${(py(v) - 3).toFixed(1)}" font-size="9" text-anchor="middle">${fmt(v)}</text>`)
    })
  })
  body.push(`<line x1="${M.left}" x2="${W - M.right}" y1="${H - M.bottom}" y2="${H - M.bottom}" stroke="#000"/>`)
  return frame(c.title, c.yLabel, '', body, c.series.map(s => s.name))
}
