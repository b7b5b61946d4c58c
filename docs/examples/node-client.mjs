// A TypeScript/Node backend on `run-supervisor serve`, with the typed client (actors/hosts/client):
// the agent loop lives here, the supervisor owns the run's lifetime. A provider connect disposes every
// instance while our tool call is prepared: the close is deferred until the run ends, never interrupting it.
//
//   run-supervisor serve --directory /proj/a      # prints {"ready": true, "url": ..., "token": ...}
//   node docs/examples/node-client.mjs URL TOKEN  # one JSON line with what happened; exit 1 if it went wrong
import { Client, ExternalRun } from "../../actors/hosts/client/src/index.js";

const [url = process.env.RUN_SUPERVISOR_URL ?? "", token = process.env.RUN_SUPERVISOR_TOKEN] = process.argv.slice(2);
const client = new Client({ url, token });
const feed = client.feed({ after: "0" }); // every event, resumed with Last-Event-ID if the connection drops
const compat = client.feed({ compat: true, after: "0" }); // seed 002's GET /event
const run = await ExternalRun.start(client, feed, { run_id: `node-${process.pid}`, session: "node-session", directory: "/proj/a" });

await run.step("model");
await run.step("model", { finished: true });
await run.part("bash", "pending");
await run.part("bash", "prepared");
const close = await client.compatClose("global/dispose", { kind: "settings.provider.connect", id: `click-${process.pid}` });
await run.part("bash", "running");
await run.part("bash", "completed");
const finished = await run.end(); // reports end, waits for run.finished
const disposed = await compat.waitFor(
  /** @type {(e: any) => e is any} */ ((e) => e.type === "global.disposed" && e.properties.lifecycleActionID === close.lifecycleActionID),
);
feed.close();
compat.close();
const summary = {
  close: close.status,
  affected: close.affectedDirectoryKeys,
  outcome: finished.outcome,
  card: finished.parts.map((p) => `${p.tool}: ${p.state}`),
  interrupts: feed.seen.filter((i) => i.event.type === "external.interrupt" && i.event.run_id === run.runId).length,
  global_disposed_after_run: !!disposed,
};
console.log(JSON.stringify(summary));
process.exit(summary.close === "deferred" && summary.outcome === "completed" && summary.interrupts === 0 ? 0 : 1);
