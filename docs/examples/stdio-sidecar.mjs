// A desktop shell (Electron, Tauri...) with the supervisor as a sidecar, on the typed client's stdio
// transport: it spawns `run-supervisor stdio`, sends one JSON request a line (answers matched by id) and
// reads events from the same stdout. Closing stdin shuts the sidecar down.
//
//   node docs/examples/stdio-sidecar.mjs [path/to/run-supervisor]   # one JSON line; exit 1 if it went wrong
import { ExternalRun, StdioClient, eventOf } from "../../actors/hosts/client/src/index.js";

const sidecar = StdioClient.spawn({ command: process.argv[2] ?? "run-supervisor", args: ["--directory", "/proj/a"] });
const run = await ExternalRun.start(sidecar, sidecar.feed, { run_id: "r1", session: "chat-1", directory: "/proj/a" });
await run.step("tool_input");
await run.part("bash", "pending");
const close = await sidecar.close({ do: "reload", mode: "maintenance", origin: "project.reload", directory: "/proj/a" });
sidecar.child.stdin?.write("{oops\n"); // a malformed line gets an error line; the sidecar keeps reading
await run.part("bash", "prepared");
await run.part("bash", "running");
await run.part("bash", "completed");
const finished = await run.end();
await sidecar.feed.waitFor(eventOf("lifecycle.completed", { action_id: close.action_id ?? "" }));
const code = await sidecar.stop(); // EOF: a shutdown, then exit 0
const shutdown = await sidecar.feed.waitFor(eventOf("lifecycle.requested", { do: "shutdown" }));
console.log(JSON.stringify({
  close: close.result,
  blocking_runs: close.blocking_runs,
  outcome: finished.outcome,
  error_line: sidecar.errors[0]?.error,
  shutdown_origin: shutdown.origin,
  exit: code,
}));
process.exit(close.result === "deferred" && finished.outcome === "completed" && code === 0 ? 0 : 1);
