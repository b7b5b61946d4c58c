// A run the client owns (an "external run"): the agent loop lives here, the supervisor owns the
// run's lifetime. Reports go out as calls; interrupts and answers come back on the event stream.

import { WaitTimeout } from "./events.js";

/** @typedef {import("../types/openapi.js").components["schemas"]} Schemas */
/** @typedef {import("./events.js").WireEvent} WireEvent */
/** @typedef {import("./events.js").EventFeed} EventFeed */
/** @typedef {Schemas["ExternalReport"]} Report */
/**
 * Why the run stopped without the loop: an interrupt to obey (report `end`), the run recovered as a
 * crash after the server restarted (it is over: `run.recovered`, no `external.interrupt` comes), or
 * the run finished without the client's `end` (the server ended it after a second lease).
 * @typedef {Schemas["InterruptNotice"] | Schemas["RunRecovered"] | Schemas["RunFinished"]} Interrupt
 */
/**
 * What an external run needs of a transport (the HTTP `Client` and the `StdioClient` both are one).
 * @typedef {object} Wire
 * @property {(body: import("./http.js").StartBody) => Promise<import("./http.js").Started>} startRun
 * @property {(runId: string, report: Report) => Promise<Schemas["ReportOutcome"]>} report
 */

/** The run was interrupted (or recovered, or ended) while the loop waited: stop, and report `end`. */
export class RunInterrupted extends Error {
  /** @param {Interrupt} event */
  constructor(event) {
    super(`run ${event.run_id} ${event.type === "external.interrupt" ? `interrupted: ${event.reason}` : event.type}`);
    this.name = "RunInterrupted";
    this.event = event;
  }
}

/** @param {string} runId */
const interruptOf = (runId) =>
  /** @type {(event: WireEvent) => event is Interrupt} */ (
    (event) =>
      (event.type === "external.interrupt" || event.type === "run.recovered" || event.type === "run.finished") &&
      event.run_id === runId
  );

export class ExternalRun {
  /**
   * Start a run and wait until it is active or queued (the start's answer).
   * @param {Wire} wire
   * @param {EventFeed} feed the transport's event feed (opened before the start, so nothing is missed)
   * @param {import("./http.js").StartBody} body
   * @param {{ keepAlive?: boolean }} [options] `keepAlive` (default true): heartbeat every third of the lease
   */
  static async start(wire, feed, body, options = {}) {
    const started = await wire.startRun(body);
    if (!started.run_id) throw new Error(`the run was not started: ${started.code}: ${started.error}`);
    const run = new ExternalRun(wire, feed, started.run_id, started.lease_ms ?? 30000);
    if (options.keepAlive ?? true) run.keepAlive();
    return run;
  }

  /**
   * @param {Wire} wire
   * @param {EventFeed} feed
   * @param {string} runId
   * @param {number} leaseMs
   */
  constructor(wire, feed, runId, leaseMs) {
    this.wire = wire;
    this.feed = feed;
    this.runId = runId;
    this.leaseMs = leaseMs;
    /** @type {ReturnType<typeof setInterval> | null} */
    this.timer = null;
    /** @type {Interrupt | null} the first interrupt seen, if any */
    this.interrupt = null;
    const match = interruptOf(runId);
    this.stopWatching = feed.on((item) => {
      if (!this.interrupt && match(item.event)) this.interrupt = item.event;
    });
    this.interrupt = /** @type {Interrupt | undefined} */ (feed.seen.find((item) => match(item.event))?.event) ?? null;
  }

  /**
   * Send one report; its answer (a rejection throws, as every refused call does).
   * @param {Report} report
   * @returns {Promise<Schemas["ReportOutcome"]>}
   */
  report(report) {
    return this.wire.report(this.runId, report);
  }

  /**
   * @param {Schemas["StepKind"]} kind
   * @param {{ step?: string, finished?: boolean }} [options]
   * @returns {Promise<Schemas["ReportOutcome"]>}
   */
  step(kind, options = {}) { return this.report({ type: "step", kind, ...options }); }

  /**
   * A tool card's state (`pending`, `prepared`, `running`, `completed`, `error` with `message`).
   * @param {string} tool
   * @param {Schemas["PartState"]} state
   * @param {{ call_id?: string, message?: string }} [options]
   * @returns {Promise<Schemas["ReportOutcome"]>}
   */
  part(tool, state, options = {}) { return this.report({ type: "part", tool, state, ...options }); }

  /**
   * Ask the user (a permission, or with `form: true` a form) and wait for the answer.
   * @param {Omit<Schemas["AskReport"], "type">} ask
   * @param {{ timeoutMs?: number, signal?: AbortSignal }} [options]
   * @returns {Promise<Schemas["AnswerNotice"]>}
   */
  async ask(ask, options = {}) {
    const outcome = await this.report({ type: "ask", ...ask });
    if (!outcome.ask_id) throw new Error(`the ask was not opened: ${outcome.code}: ${outcome.error}`);
    return this.waitAnswer(outcome.ask_id, options);
  }

  /**
   * The user's answer to one ask (`external.answer` of this run and ask); a RunInterrupted if the run
   * is interrupted first (a permission rejected without a message is an interrupt), WaitTimeout past
   * `timeoutMs` (default: none, a user takes their time).
   * @param {string} askId
   * @param {{ timeoutMs?: number, signal?: AbortSignal }} [options]
   * @returns {Promise<Schemas["AnswerNotice"]>}
   */
  async waitAnswer(askId, options = {}) {
    const match = interruptOf(this.runId);
    const either = await this.feed.waitFor(
      /** @type {(event: WireEvent) => event is Schemas["AnswerNotice"] | Interrupt} */ (
        (event) => (event.type === "external.answer" && event.run_id === this.runId && event.ask_id === askId) || match(event)
      ),
      { timeoutMs: options.timeoutMs ?? 2 ** 31 - 1, what: `answer to ask ${askId}`, ...(options.signal ? { signal: options.signal } : {}) },
    );
    if (either.type !== "external.answer") throw new RunInterrupted(either);
    return either;
  }

  /**
   * The interrupt, when it comes (or at once if it came): `external.interrupt`, or `run.recovered`
   * after a restart, or `run.finished` if the run ended without us.
   * @param {{ timeoutMs?: number, signal?: AbortSignal }} [options]
   * @returns {Promise<Interrupt>}
   */
  interrupted(options = {}) {
    return this.feed.waitFor(interruptOf(this.runId), {
      timeoutMs: options.timeoutMs ?? 2 ** 31 - 1,
      what: `interrupt of run ${this.runId}`,
      ...(options.signal ? { signal: options.signal } : {}),
    });
  }

  /** Throw RunInterrupted if the run was interrupted (call between steps of the loop). */
  check() {
    if (this.interrupt) throw new RunInterrupted(this.interrupt);
  }

  /**
   * Renew the lease while the loop waits (a heartbeat every third of the lease; a plain heartbeat is
   * not progress, so a hung loop is still seen as stalled). Stops at `end`.
   * @param {number} [everyMs]
   */
  keepAlive(everyMs = Math.max(50, Math.floor(this.leaseMs / 3))) {
    if (this.timer) clearInterval(this.timer);
    this.timer = setInterval(() => {
      this.report({ type: "heartbeat" }).catch(() => this.stopKeepAlive()); // finished or gone: stop
    }, everyMs);
    this.timer.unref?.();
  }

  stopKeepAlive() {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /**
   * The loop is done (`error`: it failed). The run's end comes as `run.finished`, which this waits for.
   * @param {string | null} [error]
   * @param {{ timeoutMs?: number }} [options]
   * @returns {Promise<Schemas["RunFinished"] | Schemas["RunRecovered"]>}
   */
  async end(error = null, options = {}) {
    this.stopKeepAlive();
    this.stopWatching();
    const finished = this.feed.waitFor(
      /** @type {(event: WireEvent) => event is Schemas["RunFinished"] | Schemas["RunRecovered"]} */ (
        (event) => (event.type === "run.finished" || event.type === "run.recovered") && event.run_id === this.runId
      ),
      { timeoutMs: options.timeoutMs ?? 10000, what: `end of run ${this.runId}` },
    );
    try {
      await this.report({ type: "end", error });
    } catch (failure) {
      if (!this.interrupt || this.interrupt.type === "external.interrupt") throw failure; // else it is over already
    }
    return finished;
  }
}

export { WaitTimeout };
