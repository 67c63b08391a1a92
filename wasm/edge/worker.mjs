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

export default {
  async fetch(req, env, ctx) {
    const binding = {};
    await run({ env, ctx, binding, cf: req.cf });
    return binding.handleRequest(req);
  },
};
