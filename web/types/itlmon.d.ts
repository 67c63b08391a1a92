// Types shared by the page-side scripts in web/static (itl.js, itl-module.js,
// itl-worker.js), for `tsc --noEmit` (make vet). Not served.

/** The facts of one request the shim keeps (nothing of its body but the model). */
interface ItlmonFacts {
  href: string; // origin + redacted path: what is sent
  full: string; // the URL without fragment: only to look up resource timing in the page
  method: string;
  model: string;
  signal: AbortSignal | null;
  urlMatch: boolean;
  eager: boolean; // looks like a streamed completion: measured from the moment it is issued
  sampled: boolean;
  modelRead?: Promise<void>; // settles when the model's read from a clone of a Request's body ends (requestModel)
}

/** One measured stream, as the loader tracks it. It holds nothing that keeps the body alive. */
interface ItlmonRec {
  pid: number; // the page's stream id (the module host maps it to the module's)
  sid: Uint8Array; // 16 random bytes: the stream id sent
  href: string;
  model: string;
  full: string;
  status: number;
  lastAt: number; // performance.now() of its last read
  queued: number; // bytes its reads take in the queue's bound while the module loads (see stageRead)
  done: boolean;
  collected: boolean; // its body was reported garbage collected and not read since
  pulling: boolean; // a read of the original body is in flight: the body is alive
  failedAt: number; // performance.now() of a network error waiting out its grace (see endOnError), else -1
}

/** A call to the module made before it was ready, replayed in order. */
type ItlmonQueued =
  | ['s', number, unknown[]]
  | ['f', Uint8Array, number, Float64Array, number]
  | ['e', number, number, number, number, string, (f: Float64Array) => void];

/** What itlmon.onStream listeners get (see SUMMARY in itl.js). */
interface ItlmonSummary {
  id: string;
  url: string;
  model: string;
  status: string;
  end: string;
  headersMs: number;
  [field: string]: unknown;
}

/** What itl-module.js hands to itl.js through itlmon.__module. */
interface ItlmonHost {
  protocol: number;
  start(env: ItlmonHostEnv): Promise<ItlmonHostAPI>;
}

interface ItlmonHostEnv {
  collector: string; // base URL of the collector, without a trailing slash
  worker: boolean; // try a Worker first
  summaryFields: number;
  fetch: typeof fetch; // the page's original fetch
  fail(msg: string, e?: unknown): void; // turns measuring off for good
  timing: { workerError: string; replayed: number };
  nonce: string; // the tag's CSP nonce, for the scripts the host adds
  keepBytes: number; // the bound of the pagehide copies in a Worker; 0: the default (testHooks only)
  workerWaitMs?: number; // the bound of the Worker's start once it has the module; 0: the default (testHooks only)
}

/** What itl.js hands the module's configure (itl-module.js adds what it knows of the browser). */
interface ItlmonModuleConfig {
  site: string;
  wsURL: string;
  beaconURL: string;
  release: string;
  flushMs: number; // at most one batch per this interval; 0: 2 s
  /**
   * itlmon.init({ socketIdleMs }): the WebSocket to the collector opens when there are records to send and
   * closes after this many ms with nothing to send and nothing unacknowledged; the next record opens a new
   * one (one handshake per burst of streams). 0: the default, 30,000. A collector that sheds load closes
   * with 1013 and "retry-after=N": the module keeps its records and opens no socket for N s plus up to N/2 s.
   */
  socketIdleMs: number;
  testHooks: boolean;
  pageOrigin: string;
  pagePath: string;
  [more: string]: unknown;
}

/** The module as itl.js uses it, the same with it in a Worker or on the main thread (see itl-module.js). */
interface ItlmonHostAPI {
  mode: 'worker' | 'main';
  flushMs: number;
  flushBytes: number;
  configure(c: object): Promise<true | string>;
  start(pid: number, args: unknown[]): void;
  feed(stage: Uint8Array, nb: number, ops: Float64Array, n: number): [Uint8Array, Float64Array] | null;
  end(pid: number, at: number, kind: number, status: number, proto: string, done: (f: Float64Array) => void): void;
  pagehide(): void;
  pageshow(): void;
  settled(): Promise<void>;
  query(what: string, arg?: unknown): Promise<any>;
  // kept: what the page keeps for a pagehide replay (a Worker only; itlmon._kept, for tests)
  kept?(): { streams: Array<{ pid: number; bytes: number; lost: boolean }>; batches: number; slabs: number; slabBytes: number; spare: boolean };
}

/** A copy of one stream the page keeps for a pagehide replay (itl-module.js workerAPI). */
interface ItlmonKept {
  args: unknown[]; // the module's start arguments
  bytes: number; // the bytes of its reads so far
  msg: number; // the number of its last stream message to the Worker
  end: [number, number, number, string] | null; // at, kind, status, proto
  lost: boolean; // its reads passed the bound: it cannot be replayed
}

/** A copy of a batch posted to the Worker, kept for a pagehide replay (itl-module.js). */
interface ItlmonKeptBatch {
  slab: ItlmonSlab; // the memory it is in
  bytes: Uint8Array; // the batch's bytes
  ops: Float64Array; // its operations as staged: page ids, lengths, stamps, busy intervals
  n: number; // how many
  pids: number[]; // the kept streams that read in it
}

/** An array kept batches are copied into, one after the other (itl-module.js). */
interface ItlmonSlab {
  bytes: Uint8Array;
  used: number; // bytes filled
  batches: number; // kept batches in it
}

/** globalThis.__itlmon_go: the Go module's exports (wasm/browser). */
interface ItlmonGo {
  configure(c: object): true | string;
  start(...args: unknown[]): number;
  feed(bytes: Uint8Array, ops: Uint8Array, n: number): void;
  end(id: number, at: number, kind: number, status: number, proto: string, out: Uint8Array): boolean;
  pagehide(): void;
  pageshow(): void;
  mirror(now?: number): [Uint8Array | null, Uint8Array | null] | null;
  stats(): Record<string, number>;
  _crash(mode: unknown): unknown;
}

/** The inline snippet's side (itl-snippet.js, itlmon.__itlmonSnippet), version 1, as itl.js sees it. */
interface ItlmonSnippet {
  v: number;
  orig: typeof fetch; // the page's original fetch
  fetch: typeof fetch; // the snippet's function installed as window.fetch
  t: number; // performance.now() when the snippet ran
  loadAt: number; // when it requested itl.js
  missed: number; // streamed responses it gave the page unmeasured (itl.js came too late)
  attach(h: {
    shim: typeof fetch; // the snippet's fetch calls this from now on
    late(resp: Response, args: IArguments, t0: number, headersAt: number): Response;
    lateError(args: IArguments, t0: number, at: number, err: unknown): void;
    ready: Promise<boolean>;
  }): void;
}
