// What the tests share: the command to run (RUN_SUPERVISOR_BIN, e.g. a one-file binary, else the
// checkout's venv, else `run-supervisor` on PATH) and a proxy that can hold or cut what passes.

import { existsSync, mkdtempSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const venv = fileURLToPath(new URL("../../../../.venv/bin/run-supervisor", import.meta.url));
export const command = process.env.RUN_SUPERVISOR_BIN ?? (existsSync(venv) ? venv : "run-supervisor");

/** @param {string} prefix */
export const tempDir = (prefix) => mkdtempSync(join(tmpdir(), prefix));

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
