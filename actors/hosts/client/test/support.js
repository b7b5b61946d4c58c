// What the tests share: the command to run (RUN_SUPERVISOR_BIN, e.g. a one-file binary, else the
// checkout's venv, else `run-supervisor` on PATH), a flow played over either transport, and a proxy
// that can hold or cut what passes.

import assert from "node:assert/strict";
import { existsSync, mkdtempSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { StdioClient, serve } from "../src/index.js";

const venv = fileURLToPath(new URL("../../../../.venv/bin/run-supervisor", import.meta.url));
export const command = process.env.RUN_SUPERVISOR_BIN ?? (existsSync(venv) ? venv : "run-supervisor");

/** @param {string} prefix */
export const tempDir = (prefix) => mkdtempSync(join(tmpdir(), prefix));

/** @typedef {import("../src/index.js").EventFeed} EventFeed */

/**
 * Play `flow` against a real `run-supervisor serve` (started with `args`) and a feed from the
 * buffer's start; after it, the feed is closed and the server stopped (exit 0).
 * @param {string[]} args
 * @param {(client: import("../src/index.js").Client, feed: EventFeed) => Promise<void>} flow
 */
export async function overHttp(args, flow) {
  const served = await serve({ command, args });
  const feed = served.client.feed({ after: "0" });
  try {
    await flow(served.client, feed);
  } finally {
    feed.close();
    assert.equal(await served.stop(), 0);
  }
}

/**
 * Play `flow` against a real `run-supervisor stdio` sidecar (spawned with `args`) and its feed;
 * after it, the sidecar is stopped (exit 0).
 * @param {string[]} args
 * @param {(sidecar: StdioClient, feed: EventFeed) => Promise<void>} flow
 */
export async function overStdio(args, flow) {
  const sidecar = StdioClient.spawn({ command, args });
  try {
    await flow(sidecar, sidecar.feed);
  } finally {
    assert.equal(await sidecar.stop(), 0);
  }
}

/**
 * A loopback proxy in front of `target`: `hold(match, ms)` answers the next matching request `ms`
 * late (the request itself reaches the server at once); `cutStreams()` ends the event streams
 * passing through (a dropped connection, as the network does).
 * @param {string} target
 */
export async function proxy(target) {
  /** @type {{ match: (req: http.IncomingMessage) => boolean, ms: number }[]} */
  const holds = [];
  /** @type {Set<http.ServerResponse>} */
  const streams = new Set();
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const at = holds.findIndex((h) => h.match(req));
    const held = at >= 0 ? holds.splice(at, 1)[0] : undefined;
    /** @type {Record<string, string>} */
    const headers = {};
    for (const [key, value] of Object.entries(req.headers)) {
      if (typeof value === "string" && key !== "host" && key !== "connection") headers[key] = value;
    }
    const upstream = await fetch(new URL(req.url ?? "/", target), {
      method: req.method,
      headers,
      body: chunks.length ? Buffer.concat(chunks) : undefined,
    });
    if (held) await new Promise((resolve) => setTimeout(resolve, held.ms));
    res.writeHead(upstream.status, { "content-type": upstream.headers.get("content-type") ?? "application/json" });
    if (!upstream.body) {
      res.end();
      return;
    }
    if ((upstream.headers.get("content-type") ?? "").startsWith("text/event-stream")) streams.add(res);
    try {
      for await (const chunk of upstream.body) if (!res.destroyed) res.write(chunk);
    } catch { /* the upstream was cut */ }
    streams.delete(res);
    res.end();
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(undefined)));
  const address = /** @type {import("node:net").AddressInfo} */ (server.address());
  return {
    url: `http://127.0.0.1:${address.port}`,
    /** @param {(req: http.IncomingMessage) => boolean} match @param {number} ms */
    hold(match, ms) { holds.push({ match, ms }); },
    cutStreams() { for (const res of streams) res.destroy(); streams.clear(); },
    close() {
      for (const res of streams) res.destroy();
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve(undefined)));
    },
  };
}
