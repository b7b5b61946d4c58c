// The client against a real `run-supervisor serve` on 127.0.0.1, which each test starts and stops.

import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Client, ExternalRun, RunInterrupted, WireError, eventOf, parseEventId, serve } from "../src/index.js";
import { command, proxy, tempDir } from "./support.js";

const opts = { timeout: 60000 };

/** @type {import("../src/index.js").EventFeed[]} */
const feeds = [];
/** @param {import("../src/index.js").EventFeed} feed */
const kept = (feed) => { feeds.push(feed); return feed; };

describe("against serve", opts, () => {
  /** @type {import("../src/index.js").Served} */
  let served;
  before(async () => { served = await serve({ command, args: ["--directory", "/proj/a", "--lease-ms", "5000"] }); });
  after(async () => {
    for (const feed of feeds.splice(0)) feed.close();
    assert.equal(await served?.stop(), 0);
  });

  test("an agent loop: a tool card, a permission, a form, and a dispose deferred until the run ends", async () => {
    const { client } = served;
    const feed = kept(client.feed({ after: "0" }));
    const compat = kept(client.feed({ compat: true }));
    const run = await ExternalRun.start(client, feed, { session: "s-loop", directory: "/proj/a" });
    await run.step("model");
    await run.part("bash", "pending", { call_id: "c1" });
    const permission = await run.report({ type: "ask", tool: "bash", call_id: "c1", command: "ls" });
    assert.ok(permission.ask_id);
    const [open] = await client.asks(run.runId);
    assert.equal(open?.ask_id, permission.ask_id);
    const answered = run.waitAnswer(permission.ask_id, { timeoutMs: 10000 });
    await client.replyPermission(permission.ask_id, { approved: true });
    assert.equal((await answered).approved, true);

    await run.part("bash", "prepared", { call_id: "c1" });
    const close = await client.compatClose("global/dispose", { kind: "settings.provider.connect", id: "click-1" });
    assert.equal(close.status, "deferred");
    await run.part("bash", "running", { call_id: "c1" });
    await run.part("bash", "completed", { call_id: "c1" });

    const formAsk = run.ask({ form: true, title: "Which branch?", questions: [] }, { timeoutMs: 10000 });
    const asked = await feed.waitFor(eventOf("ask.requested", { run_id: run.runId, kind: "form" }));
    await client.answerForm(asked.ask_id, { answer: "main" });
    assert.equal((await formAsk).answer, "main");

    const finished = await run.end();
    assert.equal(finished.type === "run.finished" && finished.outcome, "completed");
    assert.deepEqual(finished.parts.map((p) => `${p.tool}:${p.state}`), ["bash:completed"]);
    const disposed = await compat.waitFor(
      /** @type {(e: any) => e is any} */ ((e) => e.type === "global.disposed" && e.properties?.lifecycleActionID === close.lifecycleActionID),
    );
    assert.ok(disposed);
    assert.equal(run.interrupt, null);
    const snapshot = await client.run(run.runId);
    assert.equal(snapshot.state, "completed");
  });

  test("a cancel reaches the loop as an interrupt, and a refused call is a WireError with the server's code", async () => {
    const { client } = served;
    const feed = kept(client.feed({ after: "0" }));
    const run = await ExternalRun.start(client, feed, { session: "s-cancel", directory: "/proj/a" });
    await run.part("read", "pending", { call_id: "c1" });
    await client.cancel(run.runId, { reason: "user_cancel" });
    const interrupt = await run.interrupted({ timeoutMs: 10000 });
    assert.equal(interrupt.type === "external.interrupt" && interrupt.reason, "user_cancel");
    assert.throws(() => run.check(), RunInterrupted);
    const finished = await run.end();
    assert.equal(finished.outcome, "interrupted");
    await assert.rejects(client.run("no-such-run"), (e) => e instanceof WireError && e.status === 404 && e.code === "unknown_run");
    await assert.rejects(client.report(run.runId, { type: "heartbeat" }), (e) => e instanceof WireError && e.code === "run_finished");
  });

  test("the queries, a close in maintenance mode and its confirmation, a queue policy, directories", async () => {
    const { client } = served;
    assert.equal((await client.health()).status, "ok");
    assert.equal((await client.directories(["/proj/b"])).result, "ok");
    const feed = kept(client.feed({ after: "0" }));
    const run = await ExternalRun.start(client, feed, { session: "s-close", directory: "/proj/b" });
    await run.part("edit", "pending", { call_id: "c1" });
    await run.part("edit", "running", { call_id: "c1" });
    const close = await client.close({ do: "reload", mode: "maintenance", origin: "project.reload", directory: "/proj/b" });
    assert.equal(close.result, "deferred");
    const [pending] = await client.actions();
    assert.equal(pending?.action_id, close.action_id);
    const confirmed = await client.confirm(/** @type {string} */ (close.action_id));
    assert.deepEqual(confirmed.interrupted_runs, [run.runId]);
    const interrupt = await run.interrupted({ timeoutMs: 10000 });
    assert.equal(interrupt.type === "external.interrupt" && interrupt.reason, "lifecycle_interrupt");
    await run.end();
    assert.equal((await client.setQueuePolicy("s-close", "reject_if_busy")).result, "ok");
    assert.equal((await client.session("s-close")).session, "s-close");
    const stats = await client.statistics();
    assert.equal(typeof stats.events_buffered, "number");
  });

  test("a ticket opens the event stream without the token, once", async () => {
    const url = await served.client.eventSourceUrl({ after: "0" });
    assert.ok(!url.includes(served.client.token ?? "no token"));
    const abort = new AbortController();
    const opened = await fetch(url, { signal: abort.signal }); // no Authorization header, as EventSource
    assert.equal(opened.status, 200);
    abort.abort();
    const again = await fetch(url);
    assert.equal(again.status, 401); // single-use
    await again.body?.cancel();
  });

  test("a slow reader gets every event in order, none twice", async () => {
    const { client } = served;
    const run = await ExternalRun.start(client, kept(client.feed()), { session: "s-slow", directory: "/proj/a" });
    const abort = new AbortController();
    const stream = client.stream({ after: "0", signal: abort.signal });
    const writes = (async () => {
      for (let i = 0; i < 60; i++) {
        await run.part("bash", "pending", { call_id: `c${i}` });
        await run.part("bash", "completed", { call_id: `c${i}` });
      }
    })();
    /** @type {string[]} */
    const calls = [];
    let last = 0;
    for await (const item of stream) {
      const id = parseEventId(item.id);
      if (id) { assert.ok(id.seq * 1000 + id.sub > last); last = id.seq * 1000 + id.sub; }
      if (item.event.type === "run.part.updated" && item.event.run_id === run.runId && item.event.state === "completed") {
        calls.push(item.event.call_id);
        await new Promise((resolve) => setTimeout(resolve, 10)); // reads slowly
      }
      if (calls.length === 60) break;
    }
    abort.abort();
    await writes;
    assert.deepEqual(calls, Array.from({ length: 60 }, (_, i) => `c${i}`));
    await run.end();
  });

  test("a report that timed out is sent again and does nothing twice; a dropped stream resumes where it was", async () => {
    const front = await proxy(served.ready.url);
    try {
      const client = new Client({ url: front.url, token: served.client.token, timeoutMs: 500, retries: 2 });
      const feed = kept(client.feed({ after: "0", retryMs: 50 }));
      const run = await ExternalRun.start(client, feed, { session: "s-retry", directory: "/proj/a" });
      await run.part("bash", "pending", { call_id: "c9" });
      front.hold((req) => req.method === "POST" && (req.url ?? "").endsWith("/reports"), 1500);
      const asked = await run.report({ type: "ask", tool: "bash", call_id: "c9", command: "rm -rf build" });
      assert.ok(asked.ask_id);
      const asks = await client.asks(run.runId);
      assert.deepEqual(asks.map((a) => a.ask_id), [asked.ask_id]); // one ask, though it was sent twice
      const before = feed.lastId;
      front.cutStreams();
      await client.replyPermission(asked.ask_id, { approved: false, message: "not that" });
      const answer = await run.waitAnswer(asked.ask_id, { timeoutMs: 10000 });
      assert.equal(answer.approved, false);
      assert.equal(answer.message, "not that");
      const ids = feed.seen.map((item) => item.id).filter((id) => id !== null);
      assert.equal(new Set(ids).size, ids.length); // the resume repeated nothing
      assert.ok(before !== null && ids.includes(before) && feed.seen.every((item) => item.event.type !== "stream.reset"));
      await run.end();
    } finally {
      await front.close();
    }
  });
});

test("a restart mid-stream: the resume is reset (other_epoch) and the run arrives as run.recovered", opts, async () => {
  const journal = join(tempDir("rs-client-"), "runs.db");
  const args = ["--directory", "/proj/a", "--journal", journal];
  const env = { ...process.env, RUN_SUPERVISOR_TOKEN: "a-token-both-lives-share" }; // a restart keeps the token
  const first = await serve({ command, args, env });
  const port = String(first.ready.port);
  /** @type {import("../src/index.js").Served | undefined} */
  let second;
  try {
    /** @type {string[]} */
    const resets = [];
    const feed = kept(first.client.feed({ after: "0", retryMs: 100, onReset: (reset) => resets.push(reset.why) }));
    const run = await ExternalRun.start(first.client, feed, { session: "s-crash", directory: "/proj/a" });
    await run.part("bash", "pending", { call_id: "c1" });
    await run.part("bash", "running", { call_id: "c1" });
    await feed.waitFor(eventOf("run.part.updated", { run_id: run.runId }));
    const epoch = feed.epoch;
    await first.kill(); // a crash: the journal has the run, unfinished
    second = await serve({ command, args: [...args, "--port", port], env });
    const recovered = await run.interrupted({ timeoutMs: 20000 });
    assert.equal(recovered.type, "run.recovered");
    assert.deepEqual(resets, ["other_epoch"]);
    assert.notEqual(feed.epoch, epoch);
    const card = await feed.waitFor(eventOf("run.part.updated", { run_id: run.runId }), { fresh: false });
    assert.ok(card);
    await assert.rejects(run.report({ type: "heartbeat" }), (e) => e instanceof WireError && e.code === "run_finished");
    run.stopKeepAlive();
  } finally {
    for (const feed of feeds.splice(0)) feed.close();
    await first.stop();
    if (second) assert.equal(await second.stop(), 0);
  }
});
