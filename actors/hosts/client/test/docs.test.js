// The agent loop of docs/wire.md ("From TypeScript") runs as written, importing the package by name.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, isAbsolute, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { command, tempDir } from "./support.js";

const client = fileURLToPath(new URL("..", import.meta.url));
const wire = readFileSync(new URL("../../../../docs/wire.md", import.meta.url), "utf8");

/**
 * Run the `index`-th js block under "From TypeScript" as a program importing the package by name.
 * @param {number} index
 * @returns {Promise<string[]>} its stdout's lines
 */
async function runBlock(index) {
  const section = (wire.split("## From TypeScript")[1] ?? "").split("\n## ")[0] ?? "";
  const loop = [...section.matchAll(/```js\n([\s\S]*?)```/g)][index]?.[1];
  assert.ok(loop, `docs/wire.md has no js block ${index} under From TypeScript`);
  const dir = tempDir("rs-docs-loop-");
  mkdirSync(join(dir, "node_modules", "@run-supervisor"), { recursive: true });
  symlinkSync(client, join(dir, "node_modules", "@run-supervisor", "client"), "dir");
  writeFileSync(join(dir, "loop.mjs"), loop);
  /** @type {NodeJS.ProcessEnv} */
  const env = { ...process.env };
  delete env.RUN_SUPERVISOR_TOKEN;
  if (isAbsolute(command)) env.PATH = `${dirname(command)}:${env.PATH ?? ""}`; // serve() runs `run-supervisor`
  const { stdout } = await promisify(execFile)("node", ["loop.mjs"], { cwd: dir, env, timeout: 50000 });
  return stdout.trim().split("\n");
}

test("the agent loop of docs/wire.md runs: the dispose is deferred, the form answered, the run completed", { timeout: 60000 }, async () => {
  assert.deepEqual(await runBlock(0), ["deferred", "fix the flaky test", "completed"]);
});

test("its sessions block runs: a form per question, an always grant, a refused delete, a stop with one action id", { timeout: 60000 }, async () => {
  assert.deepEqual(await runBlock(1), ['["main",["lint","tests"]]', "true", "session_busy", "true"]);
});
