// The stdio transport: `run-supervisor stdio` as a child process, one JSON object a line each way.
// The same calls as the HTTP client (those stdio has), answers matched by `id`, events as a feed.

import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { createInterface } from "node:readline";
import { EventFeed } from "./events.js";
import { WireError } from "./http.js";
import { GROUPS, signalGroup } from "./spawn.js";

/** @typedef {import("../types/openapi.js").components["schemas"]} Schemas */
/** @typedef {import("./events.js").Item} Item */

export class StdioClient {
  /**
   * Spawn `run-supervisor stdio` (`args`: its options) and read its lines.
   * @param {{ command?: string, args?: string[], env?: NodeJS.ProcessEnv, timeoutMs?: number, keep?: number }} [options]
   */
  static spawn(options = {}) {
    const child = spawn(options.command ?? "run-supervisor", ["stdio", ...(options.args ?? [])], {
      stdio: ["pipe", "pipe", "inherit"],
      env: options.env ?? process.env,
      detached: GROUPS, // its own process group: see signalGroup
    });
    return new StdioClient(child, options);
  }

  /**
   * @param {import("node:child_process").ChildProcessWithoutNullStreams | import("node:child_process").ChildProcess} child
   * @param {{ timeoutMs?: number, keep?: number }} [options]
   */
  constructor(child, options = {}) {
    this.child = child;
    this.timeoutMs = options.timeoutMs ?? 10000;
    this.nextId = 1;
    /** @type {Map<number, { resolve: (line: any) => void, reject: (error: Error) => void }>} */
    this.pending = new Map();
    /** @type {{ type: "error", id: unknown, status: number, code: Schemas["RejectCode"], error: string }[]} error lines of no request of ours (id null) */
    this.errors = [];
    /** @type {Record<string, unknown> | null} a ready line, if the sidecar writes one */
    this.ready = null;
    /** @type {Promise<number | null>} */
    this.exited = new Promise((resolve) => child.once("exit", (code) => resolve(code)));
    /** @type {Item[]} */
    const queue = [];
    /** @type {(() => void) | null} */
    let wake = null;
    let closed = false;
    const lines = createInterface({ input: /** @type {import("node:stream").Readable} */ (child.stdout) });
    lines.on("line", (text) => {
      const line = JSON.parse(text);
      if (line.type === "event") queue.push({ id: line.id, event: line.event });
      else if (line.type === "answer" || line.type === "error") {
        const waiter = typeof line.id === "number" ? this.pending.get(line.id) : undefined;
        if (waiter) {
          this.pending.delete(line.id);
          waiter.resolve(line);
        } else if (line.type === "error") this.errors.push(line);
      } else if (line.ready) this.ready = line;
      wake?.();
    });
    lines.on("close", () => {
      closed = true;
      for (const waiter of this.pending.values()) waiter.reject(new Error("the sidecar closed its stdout"));
      this.pending.clear();
      wake?.();
    });
    async function* items() {
      for (;;) {
        while (queue.length) yield /** @type {Item} */ (queue.shift());
        if (closed) return;
        await new Promise((resolve) => { wake = () => { wake = null; resolve(undefined); }; });
      }
    }
    /** Every event the sidecar writes, from its first (one feed: stdout is one stream). */
    this.feed = new EventFeed(items(), options);
  }

  /**
   * Send one operation; its answer, or a WireError for a status of 400 and above (an `error` line too).
   * @param {Record<string, unknown> & { type: string }} operation
   * @returns {Promise<any>}
   */
  send(operation) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`${operation.type}: no answer within ${this.timeoutMs} ms`));
      }, this.timeoutMs);
      this.pending.set(id, {
        resolve: (line) => {
          clearTimeout(timer);
          if (line.type === "error") reject(new WireError(operation.type, line.status, line));
          else if (line.status >= 400) reject(new WireError(operation.type, line.status, line.answer));
          else resolve(line.answer);
        },
        reject: (error) => { clearTimeout(timer); reject(error); },
      });
      /** @type {import("node:stream").Writable} */ (this.child.stdin).write(`${JSON.stringify({ id, ...operation })}\n`);
    });
  }

  /**
   * @param {import("./http.js").StartBody} body
   * @returns {Promise<import("./http.js").Started>}
   */
  async startRun(body) {
    const runId = body.run_id ?? `run-${randomUUID()}`;
    const answer = await this.send({ ...body, type: "start_run", run_id: runId });
    return { ...answer, run_id: runId, lease_ms: body.lease_ms ?? null };
  }

  /**
   * @param {string} runId
   * @param {Schemas["ExternalReport"]} report
   * @returns {Promise<Schemas["ReportOutcome"]>}
   */
  report(runId, report) { return this.send({ type: "report", run_id: runId, report }); }

  /**
   * @param {string} runId
   * @param {Schemas["CancelRunBody"]} [body]
   * @returns {Promise<Schemas["RequestOutcome"]>}
   */
  cancel(runId, body = {}) { return this.send({ ...body, type: "cancel", run_id: runId }); }

  /**
   * @param {string} askId
   * @param {Schemas["ReplyPermissionBody"]} body
   * @returns {Promise<Schemas["RequestOutcome"]>}
   */
  replyPermission(askId, body) { return this.send({ ...body, type: "reply_permission", ask_id: askId }); }

  /**
   * @param {string} askId
   * @param {Schemas["AnswerFormBody"]} body
   * @returns {Promise<Schemas["RequestOutcome"]>}
   */
  answerForm(askId, body) { return this.send({ ...body, type: "answer_form", ask_id: askId }); }

  /**
   * @param {string} askId
   * @param {Schemas["DismissFormBody"]} [body]
   * @returns {Promise<Schemas["RequestOutcome"]>}
   */
  dismissForm(askId, body = {}) { return this.send({ ...body, type: "dismiss_form", ask_id: askId }); }

  /**
   * @param {Schemas["CloseRequestBody"]} body
   * @returns {Promise<Schemas["CloseOutcome"]>}
   */
  close(body) {
    const { directory, ...rest } = body;
    return this.send({ ...rest, ...(directory ? { directories: [directory] } : {}), type: "close" });
  }

  /**
   * @param {Schemas["ShutdownBody"]} [body]
   * @returns {Promise<Schemas["CloseOutcome"]>}
   */
  shutdown(body = {}) { return this.send({ ...body, type: "shutdown" }); }

  /**
   * Seed 002's closes over stdio (`global.dispose`, `instance.dispose`, `instance.reload`), answered
   * in upstream's shape as on HTTP.
   * @param {"global/dispose" | "instance/dispose" | "instance/reload"} route
   * @param {import("./http.js").CompatOptions} [options]
   * @returns {Promise<Schemas["CompatCloseAnswer"]>}
   */
  compatClose(route, options = {}) {
    return this.send({
      type: route.replace("/", "."),
      ...(options.mode ? { mode: options.mode } : {}),
      ...(options.directory ? { directory: options.directory } : {}),
      ...(options.kind ? { clientActionKind: options.kind } : {}),
      ...(options.id ? { clientActionID: options.id } : {}),
    });
  }

  /**
   * @param {string} actionId
   * @param {Schemas["ConfirmCloseBody"]} [body]
   * @returns {Promise<Schemas["CloseOutcome"]>}
   */
  confirm(actionId, body = {}) { return this.send({ ...body, type: "confirm_close", action_id: actionId }); }

  /**
   * @param {string[]} directories
   * @param {{ load?: boolean }} [options]
   * @returns {Promise<Schemas["DirectoriesAnswer"]>}
   */
  directories(directories, options = {}) {
    return this.send({ type: "directories", directories, load: options.load ?? true });
  }

  /**
   * @param {string} session
   * @param {Schemas["CancelSessionBody"]} [body]
   * @returns {Promise<Schemas["RequestOutcome"]>}
   */
  cancelSession(session, body = {}) { return this.send({ ...body, type: "cancel_session", session }); }

  /**
   * @param {string} session
   * @param {import("./http.js").SessionDelete} [options]
   * @returns {Promise<Schemas["RequestOutcome"]>}
   */
  deleteSession(session, options = {}) { return this.send({ ...options, type: "delete_session", session }); }

  /**
   * @param {string} session
   * @param {Schemas["QueuePolicy"]} queuePolicy
   * @returns {Promise<Schemas["RequestOutcome"]>}
   */
  setQueuePolicy(session, queuePolicy) { return this.send({ type: "set_queue_policy", session, queue_policy: queuePolicy }); }

  /**
   * @param {string} runId
   * @returns {Promise<Schemas["RunSnapshot"]>}
   */
  async run(runId) {
    const answer = await this.send({ type: "query", what: "run", run_id: runId });
    if (answer === null) throw unknown("unknown_run", `query run: no run '${runId}'`); // as HTTP's 404
    return answer;
  }

  /**
   * @param {string} session
   * @returns {Promise<Schemas["SessionSnapshot"]>}
   */
  async session(session) {
    const answer = await this.send({ type: "query", what: "session", session });
    if (answer === null) throw unknown("not_found", `query session: no session '${session}'`);
    return answer;
  }

  /**
   * @param {string} [runId]
   * @returns {Promise<Schemas["AskSnapshot"][]>}
   */
  asks(runId) { return this.send({ type: "query", what: "asks", ...(runId === undefined ? {} : { run_id: runId }) }); }

  /** @returns {Promise<Schemas["ActionSnapshot"][]>} */
  actions() { return this.send({ type: "query", what: "actions" }); }

  /** @returns {Promise<Omit<Schemas["HostStatistics"], "external_runs" | "sse_listeners" | "events_buffered">>} */
  statistics() { return this.send({ type: "query", what: "statistics" }); }

  /** @returns {Promise<Schemas["HooksState"]>} the cache registrations (caches kept out of process) */
  hooks() { return this.send({ type: "query", what: "hooks" }); }

  /**
   * @param {Schemas["HooksRegisterBody"]} [body]
   * @returns {Promise<Schemas["HooksRegistered"]>}
   */
  registerHooks(body = {}) { return this.send({ ...body, type: "register_hooks" }); }

  /**
   * @param {string} requestId
   * @param {Schemas["HookAckBody"]} [body]
   * @returns {Promise<Schemas["CacheAck"]>}
   */
  ackHook(requestId, body = {}) { return this.send({ ...body, type: "ack_hook", request_id: requestId }); }

  /**
   * @param {string} registration
   * @returns {Promise<Schemas["HooksUnregistered"]>}
   */
  unregisterHooks(registration) { return this.send({ type: "unregister_hooks", registration }); }

  /**
   * @param {string} registration
   * @returns {Promise<Schemas["HooksRenewed"]>}
   */
  renewHooks(registration) { return this.send({ type: "renew_hooks", registration }); }

  /**
   * Close stdin (a shutdown, origin `stdin.closed`) and wait for the exit; SIGKILL past `ms`.
   * @param {number} [ms]
   */
  async stop(ms = 10000) {
    /** @type {import("node:stream").Writable} */ (this.child.stdin).end();
    const timer = setTimeout(() => signalGroup(this.child, "SIGKILL"), ms);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }
}

/**
 * stdio answers a query of what it does not know with null; HTTP with a 404: one error for both.
 * @param {Schemas["RejectCode"]} code
 * @param {string} error
 */
const unknown = (code, error) => new WireError("query", 404, { result: "rejected", code, error });
