/** One figure of `npm run bench`, beside its ceiling where it has one (see run.ts). */
export interface Row {
  id: string;
  scenario: string;
  value: number;
  unit: string;
  p50_ms?: number;
  p99_ms?: number;
  peak_rss_mib?: number;
  ceiling?: number;
  ratio?: number;
  target: string;
  met: boolean | null;
  note?: string;
}
