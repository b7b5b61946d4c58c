// The same client calls against `run-supervisor stdio` (the sidecar over JSON lines), spawned and stopped here.

import assert from "node:assert/strict";
import { test } from "node:test";
import { ExternalRun, RunInterrupted, WireError, eventOf } from "../src/index.js";
import { overStdio } from "./support.js";

test("over stdio: a tool card, a permission, a form, a deferred reload, a cancel, then EOF shuts the sidecar down", { timeout: 60000 }, () =>
  overStdio(["--directory", "/proj/a", "--lease-ms", "5000"], async (sidecar, feed) => {
    const run = await ExternalRun.start(sidecar, feed, { run_id: "r1", session: "chat-1", directory: "/proj/a" });
    await run.step("model");
    await run.part("bash", "pending", { call_id: "c1" });
    const permission = await run.report({ type: "ask", tool: "bash", call_id: "c1", command: "make" });
    assert.ok(permission.ask_id);
    assert.deepEqual((await sidecar.asks("r1")).map((a) => a.ask_id), [permission.ask_id]);
    const answered = run.waitAnswer(permission.ask_id, { timeoutMs: 10000 });
    await sidecar.replyPermission(permission.ask_id, { approved: true });
    assert.equal((await answered).approved, true);
    await run.part("bash", "prepared", { call_id: "c1" });
    const close = await sidecar.close({ do: "reload", mode: "maintenance", origin: "project.reload", directory: "/proj/a" });
    assert.equal(close.result, "deferred");
    await run.part("bash", "running", { call_id: "c1" });
    await run.part("bash", "completed", { call_id: "c1" });
    const form = run.ask({ form: true, title: "Which branch?" }, { timeoutMs: 10000 });
    const asked = await feed.waitFor(eventOf("ask.requested", { run_id: "r1", kind: "form" }));
    await sidecar.answerForm(asked.ask_id, { answer: "main" });
    assert.equal((await form).answer, "main");
    const finished = await run.end();
    assert.equal(finished.outcome, "completed");
    await feed.waitFor(eventOf("lifecycle.completed", { action_id: /** @type {string} */ (close.action_id) }));
    assert.equal((await sidecar.run("r1")).state, "completed");

    const second = await ExternalRun.start(sidecar, feed, { run_id: "r2", session: "chat-2", directory: "/proj/a" });
    const dispose = await sidecar.compatClose("global/dispose", { kind: "settings.provider.connect", id: "click-1" });
    assert.equal(dispose.status, "deferred"); // r2 is active: seed 002's dispose waits for it
    await sidecar.cancel("r2", { reason: "user_cancel" });
    const interrupt = await second.interrupted({ timeoutMs: 10000 });
    assert.equal(interrupt.type === "external.interrupt" && interrupt.reason, "user_cancel");
    assert.throws(() => second.check(), RunInterrupted);
    assert.equal((await second.end()).outcome, "interrupted");
    await assert.rejects(sidecar.run("nope"), (e) => e instanceof WireError && e.code === "unknown_run");
    assert.equal(typeof (await sidecar.statistics()).runs_active, "number");
  }));
