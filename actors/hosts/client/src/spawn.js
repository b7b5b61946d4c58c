// Starting the sidecar: `run-supervisor serve` (HTTP) or `run-supervisor stdio` (JSON lines).

import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { Client } from "./http.js";

/**
 * The ready line serve prints on stdout once it listens.
 * @typedef {import("../types/openapi.js").components["schemas"]["ReadyLine"]} Ready
 */

/**
 * @typedef {object} SpawnOptions
 * @property {string} [command] the executable (default `run-supervisor`: the installed script, or a
 *   one-file binary built by scripts/build_binary.py)
 * @property {string[]} [args] serve's options (`--directory`, `--journal`, `--lease-ms`, ...)
 * @property {NodeJS.ProcessEnv} [env]
 * @property {number} [readyTimeoutMs] how long to wait for the ready line (default 30,000 ms)
 * @property {Partial<import("./http.js").ClientOptions>} [client] options of the client made on it
 */

/** A started `run-supervisor serve`: its ready line, a client on it, and how to stop it. */
export class Served {
  /**
   * @param {import("node:child_process").ChildProcess} child
   * @param {Ready} ready
   * @param {Client} client
   */
  constructor(child, ready, client) {
    this.child = child;
    this.ready = ready;
    this.client = client;
    /** @type {Promise<number | null>} the exit code once it exits (null: killed by a signal) */
    this.exited = new Promise((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) resolve(child.exitCode);
      else child.once("exit", (code) => resolve(code));
    });
  }

  /**
   * Stop it: SIGTERM (a shutdown with grace), then SIGKILL if it has not exited within `ms`.
   * @param {number} [ms]
   */
  async stop(ms = 10000) {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill("SIGTERM");
    const timer = setTimeout(() => this.child.kill("SIGKILL"), ms);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Kill it at once (SIGKILL): what a crash looks like to the journal. */
  kill() {
    this.child.kill("SIGKILL");
    return this.exited;
  }
}

/**
 * Spawn `run-supervisor serve` on a free loopback port and wait for its ready line.
 * @param {SpawnOptions} [options]
 * @returns {Promise<Served>}
 */
export async function serve(options = {}) {
  const child = spawn(options.command ?? "run-supervisor", ["serve", "--port", "0", ...(options.args ?? [])], {
    stdio: ["ignore", "pipe", "pipe"],
    env: options.env ?? process.env,
  });
  /** @type {string[]} */
  const stderr = [];
  child.stderr?.on("data", (chunk) => {
    stderr.push(String(chunk));
    if (stderr.length > 50) stderr.shift();
  });
  const lines = createInterface({ input: /** @type {import("node:stream").Readable} */ (child.stdout) });
  const ms = options.readyTimeoutMs ?? 30000;
  try {
    const ready = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ready line within ${ms} ms`)), ms);
      lines.once("line", (line) => {
        clearTimeout(timer);
        try {
          resolve(JSON.parse(line));
        } catch {
          reject(new Error(`not a ready line: ${line}`));
        }
      });
      child.once("error", (error) => { clearTimeout(timer); reject(error); });
      child.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`serve exited ${code} before its ready line: ${stderr.join("").trim()}`));
      });
    });
    /** @type {Ready} */
    const line = ready;
    const token = options.client?.token ?? line.token ?? (options.env ?? process.env).RUN_SUPERVISOR_TOKEN;
    const client = new Client({ ...options.client, url: line.url, ...(token ? { token } : {}) });
    return new Served(child, line, client);
  } catch (error) {
    child.kill("SIGKILL");
    throw error;
  }
}
