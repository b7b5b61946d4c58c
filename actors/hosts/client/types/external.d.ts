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
    constructor(event: Interrupt);
    event: Interrupt;
}
export class ExternalRun {
    /**
     * Start a run and wait until it is active or queued (the start's answer).
     * @param {Wire} wire
     * @param {EventFeed} feed the transport's event feed (opened before the start, so nothing is missed)
     * @param {import("./http.js").StartBody} body
     * @param {{ keepAlive?: boolean }} [options] `keepAlive` (default true): heartbeat every third of the lease
     */
    static start(wire: Wire, feed: EventFeed, body: import("./http.js").StartBody, options?: {
        keepAlive?: boolean;
    }): Promise<ExternalRun>;
    /**
     * @param {Wire} wire
     * @param {EventFeed} feed
     * @param {string} runId
     * @param {number} leaseMs
     */
    constructor(wire: Wire, feed: EventFeed, runId: string, leaseMs: number);
    wire: Wire;
    feed: import("./events.js").EventFeed;
    runId: string;
    leaseMs: number;
    /** @type {ReturnType<typeof setInterval> | null} */
    timer: ReturnType<typeof setInterval> | null;
    /** @type {Interrupt | null} the first interrupt seen, if any */
    interrupt: Interrupt | null;
    stopWatching: () => void;
    /**
     * Send one report; its answer (a rejection throws, as every refused call does).
     * @param {Report} report
     * @returns {Promise<Schemas["ReportOutcome"]>}
     */
    report(report: Report): Promise<Schemas["ReportOutcome"]>;
    /**
     * @param {Schemas["StepKind"]} kind
     * @param {{ step?: string, finished?: boolean }} [options]
     * @returns {Promise<Schemas["ReportOutcome"]>}
     */
    step(kind: Schemas["StepKind"], options?: {
        step?: string;
        finished?: boolean;
    }): Promise<Schemas["ReportOutcome"]>;
    /**
     * A tool card's state (`pending`, `prepared`, `running`, `completed`, `error` with `message`).
     * @param {string} tool
     * @param {Schemas["PartState"]} state
     * @param {{ call_id?: string, message?: string }} [options]
     * @returns {Promise<Schemas["ReportOutcome"]>}
     */
    part(tool: string, state: Schemas["PartState"], options?: {
        call_id?: string;
        message?: string;
    }): Promise<Schemas["ReportOutcome"]>;
    /**
     * Ask the user (a permission, or with `form: true` a form) and wait for the answer.
     * @param {Omit<Schemas["AskReport"], "type">} ask
     * @param {{ timeoutMs?: number, signal?: AbortSignal }} [options]
     * @returns {Promise<Schemas["AnswerNotice"]>}
     */
    ask(ask: Omit<Schemas["AskReport"], "type">, options?: {
        timeoutMs?: number;
        signal?: AbortSignal;
    }): Promise<Schemas["AnswerNotice"]>;
    /**
     * The user's answer to one ask (`external.answer` of this run and ask); a RunInterrupted if the run
     * is interrupted first (a permission rejected without a message is an interrupt), WaitTimeout past
     * `timeoutMs` (default: none, a user takes their time).
     * @param {string} askId
     * @param {{ timeoutMs?: number, signal?: AbortSignal }} [options]
     * @returns {Promise<Schemas["AnswerNotice"]>}
     */
    waitAnswer(askId: string, options?: {
        timeoutMs?: number;
        signal?: AbortSignal;
    }): Promise<Schemas["AnswerNotice"]>;
    /**
     * The interrupt, when it comes (or at once if it came): `external.interrupt`, or `run.recovered`
     * after a restart, or `run.finished` if the run ended without us.
     * @param {{ timeoutMs?: number, signal?: AbortSignal }} [options]
     * @returns {Promise<Interrupt>}
     */
    interrupted(options?: {
        timeoutMs?: number;
        signal?: AbortSignal;
    }): Promise<Interrupt>;
    /** Throw RunInterrupted if the run was interrupted (call between steps of the loop). */
    check(): void;
    /**
     * Renew the lease while the loop waits (a heartbeat every third of the lease; a plain heartbeat is
     * not progress, so a hung loop is still seen as stalled). Stops at `end`.
     * @param {number} [everyMs]
     */
    keepAlive(everyMs?: number): void;
    stopKeepAlive(): void;
    /**
     * The loop is done (`error`: it failed). The run's end comes as `run.finished`, which this waits for.
     * @param {string | null} [error]
     * @param {{ timeoutMs?: number }} [options]
     * @returns {Promise<Schemas["RunFinished"] | Schemas["RunRecovered"]>}
     */
    end(error?: string | null, options?: {
        timeoutMs?: number;
    }): Promise<Schemas["RunFinished"] | Schemas["RunRecovered"]>;
}
export { WaitTimeout };
export type Schemas = import("../types/openapi.js").components["schemas"];
export type WireEvent = import("./events.js").WireEvent;
export type EventFeed = import("./events.js").EventFeed;
export type Report = Schemas["ExternalReport"];
/**
 * Why the run stopped without the loop: an interrupt to obey (report `end`), the run recovered as a
 * crash after the server restarted (it is over: `run.recovered`, no `external.interrupt` comes), or
 * the run finished without the client's `end` (the server ended it after a second lease).
 */
export type Interrupt = Schemas["InterruptNotice"] | Schemas["RunRecovered"] | Schemas["RunFinished"];
/**
 * What an external run needs of a transport (the HTTP `Client` and the `StdioClient` both are one).
 */
export type Wire = {
    startRun: (body: import("./http.js").StartBody) => Promise<import("./http.js").Started>;
    report: (runId: string, report: Report) => Promise<Schemas["ReportOutcome"]>;
};
import { WaitTimeout } from "./events.js";
