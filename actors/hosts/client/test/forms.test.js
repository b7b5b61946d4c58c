// A form answered per question (one entry per question, a list of picks for a multiple-choice one),
// over both transports; an answer that does not fit the questions is a WireError naming the entry.

import assert from "node:assert/strict";
import { test } from "node:test";
import { ExternalRun, StdioClient, WireError, eventOf } from "../src/index.js";
import { overHttp, overStdio } from "./support.js";

const questions = [
  "Which branch?",
  { question: "Which checks?", options: ["lint", "tests"], multiple: true },
];

/**
 * @param {import("../src/index.js").Client | StdioClient} wire
 * @param {import("../src/index.js").EventFeed} feed
 * @param {string} tag
 */
async function flow(wire, feed, tag) {
  const run = await ExternalRun.start(wire, feed, { run_id: `${tag}-r1`, session: `${tag}-s`, directory: "/proj/a" });
  const answered = run.ask({ form: true, title: "Push?", questions }, { timeoutMs: 10000 });
  const asked = await feed.waitFor(eventOf("ask.requested", { run_id: run.runId, kind: "form" }));
  await assert.rejects(
    wire.answerForm(asked.ask_id, { answer: [["main"], ["lint"]] }),
    (e) => e instanceof WireError && e.status === 422 && /answer\[0\]/.test(e.answer.error),
  );
  await wire.answerForm(asked.ask_id, { answer: ["main", ["lint", "tests"]] });
  assert.deepEqual((await answered).answer, ["main", ["lint", "tests"]]);
  assert.equal((await run.end()).outcome, "completed");
}

test("over HTTP: a form answered per question", { timeout: 60000 }, () =>
  overHttp(["--directory", "/proj/a"], (client, feed) => flow(client, feed, "http")));

test("over stdio: a form answered per question", { timeout: 60000 }, () =>
  overStdio(["--directory", "/proj/a"], (sidecar, feed) => flow(sidecar, feed, "stdio")));
