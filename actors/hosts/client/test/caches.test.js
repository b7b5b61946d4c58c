// Caches kept by the client (out of process), against a real serve: loaded and disposed once per
// generation, acknowledged, and never two generations of a directory alive at once.

import assert from "node:assert/strict";
import { test } from "node:test";
import { ExternalRun, eventOf, keepCaches } from "../src/index.js";
import { overHttp, overStdio } from "./support.js";

/**
 * @param {import("../src/index.js").Client | import("../src/index.js").StdioClient} client
 * @param {import("../src/index.js").EventFeed} feed
 */
async function reloadWithCaches(client, feed) {
  /** @type {string[]} */
  const log = [];
  /** @type {Map<string, number>} directory -> the generation alive */
  const alive = new Map();
  const caches = await keepCaches(client, feed, {
    name: "node-test",
    load(request) {
      assert.equal(alive.get(request.directory), undefined, "two generations alive");
      alive.set(request.directory, request.generation);
      log.push(`load ${request.directory}#${request.generation}`);
    },
    dispose(request) {
      alive.delete(request.directory);
      log.push(`dispose ${request.directory}#${request.generation}`);
    },
  });
  await client.directories(["/proj/b"]);
  await feed.waitFor(eventOf("instance.started", { directory: "/proj/b" }));
  const close = await client.close({ do: "reload", mode: "maintenance", origin: "config.updated", directory: "/proj/b" });
  assert.equal(close.result, "completed");
  await feed.waitFor(eventOf("instance.started", { directory: "/proj/b", generation: 2 }));
  // the next generation is asked for only once the old one's dispose was acknowledged
  assert.deepEqual(log, ["load /proj/b#1", "dispose /proj/b#1", "load /proj/b#2"]);
  const run = await ExternalRun.start(client, feed, { session: "s", directory: "/proj/b" });
  await run.end();
  assert.deepEqual(log, ["load /proj/b#1", "dispose /proj/b#1", "load /proj/b#2"]);
  assert.equal((await caches.close()).result, "ok");
}

test("caches out of process over HTTP: a reload disposes the old generation before the next loads, one load each", { timeout: 60000 }, () =>
  overHttp(["--lease-ms", "5000"], reloadWithCaches));

test("caches out of process over stdio: the same", { timeout: 60000 }, () => overStdio(["--lease-ms", "5000"], reloadWithCaches));

test("keepCaches renews its registration's lease, so it outlives the lease while the host lives", { timeout: 60000 }, () =>
  overHttp(["--directory", "/proj/a"], async (client, feed) => {
    const caches = await keepCaches(client, feed, { name: "short-lease", leaseMs: 900, load() {}, dispose() {} });
    assert.equal(caches.registered.lease_ms, 900);
    await new Promise((resolve) => setTimeout(resolve, 2500)); // near three leases: renewed every 300 ms
    const state = await client.hooks();
    assert.equal(state.registration, caches.registered.registration);
    assert.equal((await caches.close()).result, "ok");
    const lapsed = await client.registerHooks({ lease_ms: 100 }); // nobody renews this one
    await new Promise((resolve) => setTimeout(resolve, 400));
    assert.equal((await client.hooks()).registration, null, `${lapsed.registration} should have lapsed`);
  }));
