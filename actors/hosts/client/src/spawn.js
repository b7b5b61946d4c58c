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
    /** @type {Ready} the ready line it printed */
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
    const timer = setTimeout(() => signalGroup(this.child, "SIGKILL"), ms);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Kill it at once (SIGKILL, its whole process group): what a crash looks like to the journal. */
  kill() {
    signalGroup(this.child, "SIGKILL");
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
    detached: GROUPS, // its own process group, so a kill reaches a one-file binary's unpacked child too
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
    signalGroup(child, "SIGKILL");
    throw error;
  }
}

/** Process groups where there are (POSIX): a PyInstaller one-file binary runs its program as a child. */
export const GROUPS = process.platform !== "win32";

/**
 * Signal the child's whole process group (SIGTERM is forwarded by a one-file binary to its child;
 * SIGKILL cannot be, so it goes to the group), or the child alone where there are no groups.
 * @param {import("node:child_process").ChildProcess} child
 * @param {NodeJS.Signals} signal
 */
export function signalGroup(child, signal) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  try {
    if (GROUPS && child.pid) process.kill(-child.pid, signal);
    else child.kill(signal);
  } catch {
    child.kill(signal);
  }
}
