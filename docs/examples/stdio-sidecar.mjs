// A desktop shell (Electron, Tauri...) with the supervisor as a sidecar: it spawns
// `run-supervisor stdio`, writes one JSON request per line (with an `id` to match the answer) and
// reads answers, errors and events, one JSON object per line. Closing stdin shuts the sidecar down.
//
//   node docs/examples/stdio-sidecar.mjs [path/to/run-supervisor]
//
// Prints one JSON line with what happened; exits 1 if the run was not kept alive.

import { spawn } from "node:child_process";
import { createInterface } from "node:readline";

const command = process.argv[2] ?? "run-supervisor";
const sidecar = spawn(command, ["stdio", "--directory", "/proj/a"], { stdio: ["pipe", "pipe", "inherit"] });
const lines = createInterface({ input: sidecar.stdout });
const seen = [];
const waiting = [];

lines.on("line", (line) => {
  const message = JSON.parse(line);
  seen.push(message);
  for (const w of [...waiting]) {
    if (w.match(message)) { waiting.splice(waiting.indexOf(w), 1); w.resolve(message); }
  }
});

function until(match, ms = 10000) {
  const hit = seen.find(match);
  if (hit) return Promise.resolve(hit);
  return new Promise((resolve, reject) => {
    waiting.push({ match, resolve });
    setTimeout(() => reject(new Error(`no matching line within ${ms} ms`)), ms).unref();
  });
}

let nextId = 1;
async function request(body) {
  const id = nextId++;
  sidecar.stdin.write(JSON.stringify({ id, ...body }) + "\n");
  const reply = await until((m) => (m.type === "answer" || m.type === "error") && m.id === id);
  if (reply.type === "error") throw new Error(reply.error);
  return reply.answer;
}
const event = (type, fields = {}) =>
  until((m) => m.type === "event" && m.event.type === type && Object.entries(fields).every(([k, v]) => m.event[k] === v))
    .then((m) => m.event);

const report = (r) => request({ type: "report", run_id: "r1", report: r });

await request({ type: "start_run", run_id: "r1", session: "chat-1", directory: "/proj/a", lease_ms: 10000 });
await report({ type: "step", kind: "tool_input" });
await report({ type: "part", tool: "bash", state: "pending" });
const close = await request({ type: "close", do: "reload", mode: "maintenance", origin: "project.reload", directories: ["/proj/a"] });
// A malformed line is answered with an error line; the sidecar keeps reading.
sidecar.stdin.write("{oops\n");
const error = await until((m) => m.type === "error" && m.id === null);
await report({ type: "part", tool: "bash", state: "prepared" });
await report({ type: "part", tool: "bash", state: "running" });
await report({ type: "part", tool: "bash", state: "completed" });
await report({ type: "end" });
const finished = await event("run.finished", { run_id: "r1" });
await event("lifecycle.completed", { action_id: close.action_id });

sidecar.stdin.end(); // EOF: the sidecar shuts down and exits
const shutdown = await event("lifecycle.requested", { do: "shutdown" });
const code = await new Promise((resolve) => sidecar.on("exit", resolve));

console.log(JSON.stringify({
  close: close.result,
  blocking_runs: close.blocking_runs,
  outcome: finished.outcome,
  error_line: error.error,
  shutdown_origin: shutdown.origin,
  exit: code,
}));
process.exit(close.result === "deferred" && finished.outcome === "completed" && code === 0 ? 0 : 1);
