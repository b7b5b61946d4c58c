// Sessions a client acts on, over both transports: a stop (the active run and its queue, one action
// id), a delete (refused while busy unless confirmed), and an "always" permission grant.

import assert from "node:assert/strict";
import { test } from "node:test";
import { ExternalRun, StdioClient, WireError, eventOf } from "../src/index.js";
import { overHttp, overStdio } from "./support.js";

/**
 * One flow for either transport.
 * @param {import("../src/index.js").Client | StdioClient} wire
 * @param {import("../src/index.js").EventFeed} feed
 * @param {string} tag a prefix for names, so the two flows share nothing
 */
async function flow(wire, feed, tag) {
  const session = `${tag}-chat`;
  const run = await ExternalRun.start(wire, feed, { run_id: `${tag}-r1`, session, directory: "/proj/a" });
  const queued = await wire.startRun({ run_id: `${tag}-r2`, session, directory: "/proj/a" });
  assert.equal(queued.result, "ok");

  // An always grant: the matching open ask is approved with it, a later one as it is asked.
  const first = await run.report({ type: "ask", title: "git status? (1)", key: "bash:git status" });
  const second = await run.report({ type: "ask", title: "git status? (2)", key: "bash:git status" });
  const granted = run.waitAnswer(/** @type {string} */ (second.ask_id), { timeoutMs: 10000 });
  await wire.replyPermission(/** @type {string} */ (first.ask_id), { approved: true, always: true });
  assert.equal((await granted).approved, true);
  const later = await run.ask({ title: "git status? (3)", key: "bash:git status" }, { timeoutMs: 10000 });
  assert.equal(later.approved, true);

  // A delete of a busy session is refused; a stop ends the queue and interrupts the run, one action id.
  await assert.rejects(wire.deleteSession(session), (e) => e instanceof WireError && e.status === 409 && e.code === "session_busy");
  const stopped = await wire.cancelSession(session, { origin: "ui.stop" });
  assert.deepEqual(stopped.interrupted_runs, [`${tag}-r2`, `${tag}-r1`]);
  const interrupt = await run.interrupted({ timeoutMs: 10000 });
  assert.equal(interrupt.type === "external.interrupt" && interrupt.action_id, stopped.action_id);
  assert.equal((await run.end()).outcome, "interrupted");
  const deleted = await wire.deleteSession(session, { confirm: true });
  assert.equal(deleted.result, "ok");
  await assert.rejects(wire.session(session), (e) => e instanceof WireError && e.status === 404);
  await feed.waitFor(eventOf("run.finished", { run_id: `${tag}-r2` }));
}

const ARGS = ["--directory", "/proj/a", "--lease-ms", "5000"];

test("over HTTP: an always grant, a refused delete, a session stop with one action id, a delete", { timeout: 60000 }, () =>
  overHttp(ARGS, (client, feed) => flow(client, feed, "http")));

test("over stdio: the same", { timeout: 60000 }, () => overStdio(ARGS, (sidecar, feed) => flow(sidecar, feed, "stdio")));
