// itlmon edge Worker: the JavaScript half, the Worker's entry (app.wasm is the
// Go half, built from wasm/edge by `make edge`).
//
// This half owns every Request and Response: it proxies each request to the
// origin as the runtime gave it and returns the origin's Response, headers
// and bytes untouched (no header is parsed or rebuilt: a Set-Cookie with an
// Expires date, an ETag or a filename with a comma pass as they are). It
// decides from the path alone whether a route is measured; a route that is
// not (or a Worker without ITLMON_COLLECTOR) is a plain pass-through and never
// starts Go. On a measured route it starts the Go half once per isolate (at
// the first such request; one Go runtime then serves every request of the
// isolate), gives it the few header values it needs when the origin's
// headers arrive, and relays the body chunk by chunk, stamping each chunk
// when it arrives and handing the chunks to Go in batches; Go posts the
// timeline under ctx.waitUntil. A Go half that fails never breaks a
// response: the stream then passes unmeasured.
import "./wasm_exec.js";
import mod from "./app.wasm";

// syumai/workers (the Go half's fetch for the timeline's POST) calls it.
globalThis.tryCatch = (fn) => {
  try {
    return { result: fn() };
  } catch (e) {
    return { error: e };
  }
};

// go is the Go half's API ({ begin, feed, end }), a promise of it while it
// starts, or null: not started, or ended (it starts again at the next
// measured request).
let go = null;

function startGo() {
  if (go === null) {
    const started = new Promise((resolve, reject) => {
      const g = new Go();
      const instance = new WebAssembly.Instance(mod, { ...g.importObject, workers: { ready: () => {} } });
      // The runtime context the Go half sees as the global `context` (the
      // patched wasm_exec.js): ready hands over its API; deadlineFetch is
      // the fetch its timeline POST calls, bounded by an AbortSignal.
      const context = {
        ready: (api) => resolve(api),
        deadlineFetch: (ms) => ({
          fetch: (req, init) => fetch(req, { ...init, signal: AbortSignal.timeout(ms) }),
        }),
      };
      g.run(instance, context).then(
        () => {
          go = null;
          reject(new Error("the Go half exited"));
        },
        (e) => {
          go = null;
          reject(e);
        },
      );
    });
    go = started;
    started.then(
      (api) => {
        if (go === started) {
          go = api;
        }
      },
      (e) => console.log("itlmon edge: the Go half: " + e),
    );
  }
  return go;
}

// config is env's proxying configuration: the origin (a base URL, its path a
// prefix) and the routes measured; cached per env object.
let lastEnv, lastConfig;
function config(env) {
  if (env === lastEnv) {
    return lastConfig;
  }
  const c = { error: null, origin: null, routes: [], measure: false };
  const o = String(env.ITLMON_ORIGIN ?? "").trim();
  let u = null;
  try {
    u = new URL(o);
  } catch {}
  if (o === "") {
    c.error = "ITLMON_ORIGIN is not set";
  } else if (u === null || (u.protocol !== "http:" && u.protocol !== "https:") || u.search !== "" || u.hash !== "") {
    c.error = "ITLMON_ORIGIN: want an http(s) base URL without query, e.g. https://api.example.com";
  } else {
    c.origin = u.origin + u.pathname.replace(/\/$/, "");
  }
  for (let r of String(env.ITLMON_ROUTES ?? "").split(",")) {
    if ((r = r.trim()) === "") {
      continue;
    }
    if (!r.startsWith("/")) {
      c.error ??= "ITLMON_ROUTES: route " + r + " does not start with /";
    }
    c.routes.push(r);
  }
  c.measure = String(env.ITLMON_COLLECTOR ?? "").trim() !== "";
  lastEnv = env;
  lastConfig = c;
  return c;
}

// measured: the path is on a measured route: exact, or a prefix when the
// route ends in "*"; no routes: every path.
function measured(c, path) {
  if (!c.measure) {
    return false;
  }
  if (c.routes.length === 0) {
    return true;
  }
  return c.routes.some((r) => (r.endsWith("*") ? path.startsWith(r.slice(0, -1)) : r === path));
}

function badGateway(e) {
  console.log("itlmon edge: origin: " + e);
  return new Response("itlmon edge: origin unreachable\n", { status: 502 });
}

// relay passes body (a ReadableStream, or null) on as it arrives, through a
// native IdentityTransformStream: it returns { readable, done }, where
// readable is the stream to answer with and done resolves to "end", "abort"
// (the client went away: readable was cancelled; body is then cancelled,
// which cancels the origin's response) or "error: ..." (the origin's body
// failed). The next chunk is read from body only once the client's side took
// the last one (the identity stream holds none), so nothing is buffered.
// Each chunk is stamped (Date.now()) when it arrives and copied, and
// onChunks(bytes, lengths, times) gets them in order, in batches of up to 64
// chunks or 256 KiB, the last before done resolves. The loop is here, not in
// Go, and Go (the meter) is called once per batch: a synchronous call into Go
// costs ~0.1 ms of CPU under workerd; a JavaScript ReadableStream (pull and
// enqueue per chunk) cost ~0.2 ms per chunk, the identity stream's write a
// fraction of that.
function relay(body, onChunks) {
  if (body === null) {
    return { readable: null, done: Promise.resolve("end") };
  }
  const { readable, writable } = new IdentityTransformStream();
  const reader = body.getReader(), writer = writable.getWriter();
  let chunks = [], times = [], size = 0;
  const hand = () => {
    if (chunks.length === 0) {
      return;
    }
    const bytes = new Uint8Array(size), lengths = new Float64Array(chunks.length);
    let off = 0;
    chunks.forEach((c, i) => {
      bytes.set(c, off);
      off += c.byteLength;
      lengths[i] = c.byteLength;
    });
    const at = new Float64Array(times);
    chunks = [];
    times = [];
    size = 0;
    onChunks(bytes, lengths, at);
  };
  // A client that goes away cancels readable (workerd notices a closed
  // connection when it next writes to it: at the next chunk), which fails
  // writer.closed: the origin's body is cancelled then, a read in progress
  // ends.
  let gone = false;
  writer.closed.catch((e) => {
    gone = true;
    reader.cancel(e).catch(() => {});
  });
  const done = (async () => {
    for (;;) {
      let r;
      try {
        r = await reader.read();
      } catch (e) {
        hand();
        if (gone) {
          return "abort";
        }
        writer.abort(e).catch(() => {});
        return "error: " + e;
      }
      if (gone) {
        hand();
        return "abort";
      }
      if (r.done) {
        hand();
        await writer.close().catch(() => {});
        return gone ? "abort" : "end";
      }
      if (r.value.byteLength > 0) {
        chunks.push(r.value.slice());
        times.push(Date.now());
        size += r.value.byteLength;
        if (chunks.length >= 64 || size >= 1 << 18) {
          hand();
        }
      }
      try {
        await writer.write(r.value);
      } catch (e) {
        hand();
        reader.cancel(e).catch(() => {});
        return "abort";
      }
    }
  })();
  return { readable, done };
}

// measure relays resp through the Go half when it measures it; else resp.
function measure(api, req, resp, env, ctx, path, start, headersAt) {
  const h = resp.headers;
  const s = api.begin(env, {
    path,
    status: resp.status,
    contentType: h.get("Content-Type"),
    dataStream: h.get("X-Vercel-AI-Data-Stream"),
    streamID: h.get("X-Itlmon-Stream"),
    requestID: h.get("X-Request-Id"),
    expose: h.get("Access-Control-Expose-Headers"),
    start,
    headersAt,
    cf: req.cf,
  });
  if (s === null || s === undefined) {
    return resp;
  }
  if (s.error) {
    resp.body?.cancel();
    return new Response(s.error + "\n", { status: 500 });
  }
  // The origin's headers, copied entry by entry (each Set-Cookie its own),
  // plus the stream id when the Go half assigned one.
  const headers = new Headers(h);
  if (s.setID) {
    headers.set("X-Itlmon-Stream", s.id);
  }
  if (s.expose) {
    headers.append("Access-Control-Expose-Headers", s.expose);
  }
  let feeding = true;
  const r = relay(resp.body, (bytes, lengths, times) => {
    if (!feeding) {
      return;
    }
    try {
      api.feed(s.handle, bytes, lengths, times);
    } catch (e) {
      feeding = false; // the Go half failed: the bytes still flow
      console.log("itlmon edge: the Go half: " + e);
    }
  });
  ctx.waitUntil(
    r.done.then((how) => {
      if (feeding) {
        try {
          api.end(s.handle, how, Date.now(), ctx);
        } catch (e) {
          console.log("itlmon edge: the Go half: " + e);
        }
      }
    }),
  );
  return new Response(r.readable, { status: resp.status, statusText: resp.statusText, headers });
}

export default {
  async fetch(req, env, ctx) {
    const start = Date.now();
    const c = config(env);
    if (c.error !== null) {
      return new Response("itlmon edge: " + c.error + "\n", { status: 500 });
    }
    const url = new URL(req.url);
    // The request as the runtime gave it (method, headers, body), to the
    // origin; redirects are the client's to follow.
    const sent = fetch(new Request(c.origin + url.pathname + url.search, req), { redirect: "manual" });
    if (!measured(c, url.pathname)) {
      return sent.catch(badGateway);
    }
    const api = startGo(); // while the origin answers; once per isolate
    let resp;
    try {
      resp = await sent;
    } catch (e) {
      return badGateway(e);
    }
    const headersAt = Date.now();
    try {
      return measure(await api, req, resp, env, ctx, url.pathname, start, headersAt);
    } catch (e) {
      console.log("itlmon edge: the Go half: " + e);
      return resp; // unmeasured, untouched
    }
  },
};
