// A client in another language: Node 18+ (fetch and an SSE reader, no dependencies) drives a run it
// owns (an "external run") through a deferred close on `run-supervisor serve`.
//
//   run-supervisor serve --directory /proj/a      # prints {"ready": true, "url": ..., "token": ...}
//   node docs/examples/node-client.mjs URL TOKEN
//
// The agent loop lives here; the supervisor owns the run's lifetime. A provider connect disposes
// every instance while our tool call is prepared: the close is deferred until our run ends, and
// the run is never interrupted. Prints one JSON line with what happened; exits 1 if it did not.

const [url = process.env.RUN_SUPERVISOR_URL, token = process.env.RUN_SUPERVISOR_TOKEN] = process.argv.slice(2);
if (!url || !token) {
  console.error("usage: node node-client.mjs URL TOKEN");
  process.exit(2);
}
const headers = { Authorization: `Bearer ${token}`, "Content-Type": "application/json" };

async function post(path, body, extra = {}) {
  const response = await fetch(new URL(path, url), {
    method: "POST",
    headers: { ...headers, ...extra },
    body: JSON.stringify(body ?? {}),
  });
  const answer = await response.json();
  if (!response.ok) throw new Error(`${path}: ${response.status} ${answer.code}: ${answer.error}`);
  return answer;
}

// An SSE reader on fetch: yields {id, data} for every event, resuming with Last-Event-ID if the
// connection drops (the server replays what we missed from its buffer).
async function* events(path, signal) {
  let lastId = "0";
  for (;;) {
    const response = await fetch(new URL(path, url), { headers: { ...headers, "Last-Event-ID": lastId }, signal });
    const decoder = new TextDecoder();
    let buffer = "";
    for await (const chunk of response.body) {
      buffer += decoder.decode(chunk, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let id = null;
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("id:")) id = line.slice(3).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).trim());
        }
        if (!data.length) continue;
        if (id !== null) lastId = id;
        yield { id, data: JSON.parse(data.join("\n")) };
      }
    }
  }
}

// Wait for the first event matching `match` (bounded by `ms`).
function waiter(stream) {
  const seen = [];
  const waiting = [];
  (async () => {
    try {
      for await (const event of stream) {
        seen.push(event.data);
        for (const w of [...waiting]) if (w.match(event.data)) { waiting.splice(waiting.indexOf(w), 1); w.resolve(event.data); }
      }
    } catch { /* aborted at the end */ }
  })();
  return {
    seen,
    until(match, ms = 10000) {
      const hit = seen.find(match);
      if (hit) return Promise.resolve(hit);
      return new Promise((resolve, reject) => {
        const w = { match, resolve };
        waiting.push(w);
        setTimeout(() => reject(new Error(`no matching event within ${ms} ms`)), ms).unref();
      });
    },
  };
}

const abort = new AbortController();
const log = waiter(events("events?after=0", abort.signal));
const compat = waiter(events("event", abort.signal)); // seed 002's backend events
const runId = `node-${process.pid}`;
const report = (r) => post(`runs/${runId}/reports`, r);

await post("runs", { run_id: runId, session: "node-session", directory: "/proj/a", lease_ms: 10000 });
await log.until((e) => e.type === "run.started" && e.run_id === runId);
await report({ type: "step", kind: "model" });
await report({ type: "step", kind: "model", finished: true });
await report({ type: "part", tool: "bash", state: "pending" });
await report({ type: "part", tool: "bash", state: "prepared" });

// Settings -> connect a provider: the backend disposes every instance.
const close = await post("global/dispose", {}, {
  "x-opencode-client-action-kind": "settings.provider.connect",
  "x-opencode-client-action-id": `click-${process.pid}`,
});

await report({ type: "part", tool: "bash", state: "running" });
await report({ type: "part", tool: "bash", state: "completed" });
await report({ type: "end" });
const finished = await log.until((e) => e.type === "run.finished" && e.run_id === runId);
const disposed = await compat.until((e) => e.type === "global.disposed" && e.properties.lifecycleActionID === close.lifecycleActionID);
const interrupts = log.seen.filter((e) => e.type === "external.interrupt" && e.run_id === runId);
abort.abort();

const summary = {
  close: close.status,
  affected: close.affectedDirectoryKeys,
  outcome: finished.outcome,
  card: finished.parts.map((p) => `${p.tool}: ${p.state}`),
  interrupts: interrupts.length,
  global_disposed_after_run: !!disposed,
};
console.log(JSON.stringify(summary));
process.exit(close.status === "deferred" && finished.outcome === "completed" && interrupts.length === 0 ? 0 : 1);
