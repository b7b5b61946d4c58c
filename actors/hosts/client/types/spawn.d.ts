/**
 * Spawn `run-supervisor serve` on a free loopback port and wait for its ready line.
 * @param {SpawnOptions} [options]
 * @returns {Promise<Served>}
 */
export function serve(options?: SpawnOptions): Promise<Served>;
/**
 * Signal the child's whole process group (SIGTERM is forwarded by a one-file binary to its child;
 * SIGKILL cannot be, so it goes to the group), or the child alone where there are no groups.
 * @param {import("node:child_process").ChildProcess} child
 * @param {NodeJS.Signals} signal
 */
export function signalGroup(child: import("node:child_process").ChildProcess, signal: NodeJS.Signals): void;
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
    constructor(child: import("node:child_process").ChildProcess, ready: Ready, client: Client);
    child: import("child_process").ChildProcess;
    /** @type {Ready} the ready line it printed */
    ready: Ready;
    client: Client;
    /** @type {Promise<number | null>} the exit code once it exits (null: killed by a signal) */
    exited: Promise<number | null>;
    /**
     * Stop it: SIGTERM (a shutdown with grace), then SIGKILL if it has not exited within `ms`.
     * @param {number} [ms]
     */
    stop(ms?: number): Promise<number | null>;
    /** Kill it at once (SIGKILL, its whole process group): what a crash looks like to the journal. */
    kill(): Promise<number | null>;
}
/** Process groups where there are (POSIX): a PyInstaller one-file binary runs its program as a child. */
export const GROUPS: boolean;
/**
 * The ready line serve prints on stdout once it listens.
 */
export type Ready = import("../types/openapi.js").components["schemas"]["ReadyLine"];
export type SpawnOptions = {
    /**
     * the executable (default `run-supervisor`: the installed script, or a
     * one-file binary built by scripts/build_binary.py)
     */
    command?: string | undefined;
    /**
     * serve's options (`--directory`, `--journal`, `--lease-ms`, ...)
     */
    args?: string[] | undefined;
    env?: NodeJS.ProcessEnv | undefined;
    /**
     * how long to wait for the ready line (default 30,000 ms)
     */
    readyTimeoutMs?: number | undefined;
    /**
     * options of the client made on it
     */
    client?: Partial<import("./http.js").ClientOptions> | undefined;
};
import { Client } from "./http.js";
