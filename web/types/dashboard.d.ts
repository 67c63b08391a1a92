// Types for the dashboard (web/static/dashboard/dashboard.js), for
// `tsc --noEmit` (make vet): the JSON of the collector's dashboard API
// (collector/httpapi/dashboard.go, collector/query) and the part of uPlot
// (vendor/uplot, loaded as a global by a <script> tag) the dashboard uses.
// Not served.

/** A distribution of durations (milliseconds). */
interface DashDist {
  count: number;
  mean_ms?: number;
  p50_ms: number;
  p95_ms: number;
  p99_ms: number;
  max_ms?: number;
}

/** GET /api/summary: the report of a range, and of each value of a dimension. */
interface DashReport {
  streams: number;
  errors: number;
  aborted: number;
  failed: number;
  before_headers: number;
  before_headers_wait_ms: number;
  before_headers_share: number;
  tokens: number;
  stalls: number;
  ttft: DashDist;
  itl: DashDist;
  tokens_per_sec_p50: number;
  stall_share: number;
  jank: number;
  smooth_share: number;
  verdict: string;
}
/** GET /api/dimensions: one dimension (collector/dimension), in the dashboard's order. */
interface DashDimension {
  key: string;
  label: string;
  title?: string;
  column: string;
  rollup: boolean;
  otlp?: string;
  grafana?: boolean;
}
interface DashGroup { key: string; report: DashReport; }
interface DashSummary { report?: DashReport; rows?: DashGroup[]; }

/** GET /api/timeseries. */
interface DashPoint {
  t: string;
  streams: number;
  itl_p50_ms: number;
  itl_p95_ms: number;
  itl_p99_ms: number;
}
interface DashTimeseries { step_s: number; points?: DashPoint[]; }

/** GET /api/causes. */
interface DashHop { stalls: number; stalled_ms: number; ttft: number; }
interface DashCauseCounts {
  streams: number;
  stalls: number;
  stalls_by_cause: Record<string, number>;
  stalled_ms_by_cause: Record<string, number>;
  ttft_cause: Record<string, number>;
  network_by_hop?: Record<string, DashHop>;
}
interface DashCausePoint extends DashCauseCounts { t: string; }
interface DashCauseGroup extends DashCauseCounts { key: string; }
interface DashCauses { step_s: number; total: DashCauseCounts; points?: DashCausePoint[]; rows?: DashCauseGroup[]; }

/** GET /api/heatmap. */
interface DashHeatmap {
  step_s: number;
  bins?: { lo_ms: number; hi_ms: number }[];
  points?: { t: string; zero: number; counts: number[] }[];
}

/** GET /api/rechunk. */
interface DashRechunk {
  key: string;
  streams: number;
  events_per_read: number;
  bytes_per_read: number;
  sub_floor_share: number;
  coalesced_ttft_share: number;
  one_read_share: number;
  steady_share: number;
  bursty_share: number;
  page_stall_share: number;
  network_stall_share: number;
  flagged: boolean;
  pattern: string;
  diagnosis?: string;
}

/** GET /api/worst: one stream in brief. */
interface DashStreamBrief {
  stream_id: string;
  received_at: string;
  browser: string;
  region: string;
  country: string;
  model: string;
  release: string;
  api_origin: string;
  url_path: string;
  status: string;
  ttft_ms: number | null;
  ttft_cause: string;
  content_events: number;
  gap_p50_ms: number;
  gap_p99_ms: number;
  gap_max_ms: number;
  stalls: number;
  stalled_ms: number;
  jank: number;
  tokens_per_sec: number;
  causes: string[];
}

/** GET /api/stream: one stream. */
interface DashStream extends DashStreamBrief {
  ttfb_ms: number | null;
  duration_ms: number | null;
  reads: number;
  events: number;
  events_per_read: number;
  sub_floor_share: number;
  http_proto: string;
  format: string;
  colo?: string;
  ttft_hop?: string;
  stall_list?: { start_ms: number; end_ms: number; cause: string; hop?: string }[];
  timeline?: { at_ms: number; read: number; content: boolean }[];
  timeline_dropped: number;
  origin?: {
    ttft_ms: number | null;
    offset_ms: number;
    emit_ms: number[];
    emits_dropped: number;
    stalls: number;
    route: string;
  };
}

/** GET /api/compare. */
interface DashMetric {
  name: string;
  n_a: number;
  n_b: number;
  median_a: number;
  median_b: number;
  p90_a: number;
  p90_b: number;
  diff: number;
  rel_diff: number;
  p_superiority: number;
  p: number;
  verdict: string;
}
interface DashCompare {
  a: string;
  b: string;
  streams_a: number;
  streams_b: number;
  test: string;
  alpha: number;
  metrics?: DashMetric[];
  worse?: string[];
}

/** GET /api/values. */
interface DashValues { values?: { value: string; streams: number }[]; }

/**
 * uPlot 1.6 (vendor/uplot/uPlot.iife.min.js defines it as a global): what
 * the dashboard uses. Options and series stay loose: uPlot checks them.
 */
declare class uPlot {
  constructor(opts: Record<string, any>, data: (number | null)[][], target: HTMLElement);
  data: (number | null)[][];
  scales: Record<string, { min: number | null; max: number | null }>;
  series: Record<string, any>[];
  bbox: { left: number; top: number; width: number; height: number };
  ctx: CanvasRenderingContext2D;
  over: HTMLElement;
  destroy(): void;
  setScale(key: string, limits: { min: number; max: number }): void;
  setSize(size: { width: number; height: number }): void;
  valToPos(val: number, scaleKey: string, canvasPixels?: boolean): number;
  static paths: { stepped(opts: { align: number }): unknown };
}
