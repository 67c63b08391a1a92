// itlmon edge Worker: the JavaScript entry that runs the Go Worker (app.wasm,
// built from wasm/edge by `make edge`). It follows syumai/workers v0.32.0's
// worker.mjs and runtime/cloudflare.mjs: the module is compiled once, and each
// request gets a new Go instance whose main() serves it and exits once the
// response and the timeline's POST are done. It also hands the Go side
// request.cf (the edge's facts) through the per-instance runtime context, which
// the patched wasm_exec.js (`make edge`) exposes to Go as the global `context`.
import "./wasm_exec.js";
import mod from "./app.wasm";

globalThis.tryCatch = (fn) => {
  try {
    return { result: fn() };
  } catch (e) {
    return { error: e };
  }
};

async function run(context) {
  const go = new Go();
  let ready;
  const readyPromise = new Promise((resolve) => {
    ready = resolve;
  });
  const instance = new WebAssembly.Instance(mod, {
    ...go.importObject,
    workers: {
      ready: () => {
        ready();
      },
    },
  });
  go.run(instance, context);
  await readyPromise;
}

// relay passes body (a ReadableStream, or null) on as it arrives: it returns
// { readable, done }, where readable reads body one chunk per pull (nothing is
// read ahead) and done resolves to "end", "abort" (the runtime cancelled
// readable: the client went away; body is then cancelled, which cancels the
// origin's response) or "error: ..." (the origin's body failed). With
// onChunks, each chunk is stamped (Date.now(), what Go's clock reads) when it
// arrives and copied, and onChunks(bytes, lengths, times) gets them in order,
// in batches of up to 64 chunks or 256 KiB, the last before done resolves.
// The loop is here, not in Go, and Go (the meter) is called once per batch:
// under workerd a Go read and write per chunk costs ~0.3 ms of CPU, a
// synchronous call into Go ~0.1 ms.
function relay(body, onChunks) {
  if (body === null) {
    return { readable: null, done: Promise.resolve("end") };
  }
  const reader = body.getReader();
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
  let settle, over = false;
  const done = new Promise((resolve) => {
    settle = (how) => {
      over = true;
      if (onChunks) {
        hand();
      }
      resolve(how);
    };
  });
  const readable = new ReadableStream(
    {
      async pull(controller) {
        let r;
        try {
          r = await reader.read();
        } catch (e) {
          if (!over) {
            settle("error: " + e);
            controller.error(e);
          }
          return;
        }
        if (over) {
          return; // cancelled while reading
        }
        if (r.done) {
          settle("end");
          controller.close();
          return;
        }
        if (onChunks && r.value.byteLength > 0) {
          chunks.push(r.value.slice());
          times.push(Date.now());
          size += r.value.byteLength;
          if (chunks.length >= 64 || size >= 1 << 18) {
            hand();
          }
        }
        controller.enqueue(r.value);
      },
      cancel(reason) {
        settle("abort");
        return reader.cancel(reason);
      },
    },
    { highWaterMark: 0 },
  );
  return { readable, done };
}

export default {
  async fetch(req, env, ctx) {
    const binding = {};
    await run({ env, ctx, binding, cf: req.cf, relay });
    return binding.handleRequest(req);
  },
};
