/**
 * A report that may be sent again after a timeout without doing anything twice: the server answers a
 * repeat of the run's previous report as it did the first (see docs/wire.md, retries). A `pending`
 * part without `call_id` or a step without `step` id begins a new one, so it is not retried.
 * @param {Report} report
 */
export function retriable(report: Report): boolean;
/** @typedef {import("../types/openapi.js").components["schemas"]} Schemas */
/** @typedef {Schemas["ExternalReport"]} Report */
/** @typedef {import("./events.js").Item} Item */
/** @typedef {import("./events.js").StreamOptions} StreamOptions */
/** @typedef {Schemas["StartRunBody"]} StartBody */
/** @typedef {Schemas["StartedRun"]} Started */
/** @typedef {{ mode?: Schemas["CloseMode"], kind?: string, id?: string, directory?: string }} CompatOptions */
/** @typedef {NonNullable<import("../types/openapi.js").operations["delete_session"]["parameters"]["query"]>} SessionDelete */
/** A refused request: `status` is the HTTP status, `code` and `error` the server's (the answer is kept). */
export class WireError extends Error {
    /**
     * @param {string} what
     * @param {number} status
     * @param {any} answer
     */
    constructor(what: string, status: number, answer: any);
    status: number;
    /** @type {Schemas["RejectCode"] | undefined} */
    code: Schemas["RejectCode"] | undefined;
    answer: any;
}
/**
 * @typedef {object} ClientOptions
 * @property {string} url the server's address (the ready line's `url`)
 * @property {string} [token] the bearer token (the ready line's `token`, or the one you gave serve)
 * @property {number} [timeoutMs] each request's bound (default 10,000 ms)
 * @property {number} [retries] how many times a request that may be repeated is sent again after a
 *   timeout, a dropped connection or a 504 (default 2): GETs, and reports that `retriable` accepts
 * @property {typeof fetch} [fetch]
 */
export class Client {
    /** @param {ClientOptions} options */
    constructor(options: ClientOptions);
    url: string;
    token: string | undefined;
    timeoutMs: number;
    retries: number;
    fetch: typeof fetch;
    /** @param {Record<string, string>} [extra] */
    headers(extra?: Record<string, string>): Record<string, string>;
    /**
     * Any route: the parsed answer, or a WireError for a status of 400 and above.
     * @param {"GET" | "POST" | "PUT" | "DELETE"} method
     * @param {string} path relative, e.g. `runs/r1/reports`
     * @param {{ body?: unknown, headers?: Record<string, string>, retry?: boolean, signal?: AbortSignal }} [options]
     * @returns {Promise<any>}
     */
    call(method: "GET" | "POST" | "PUT" | "DELETE", path: string, options?: {
        body?: unknown;
        headers?: Record<string, string>;
        retry?: boolean;
        signal?: AbortSignal;
    }): Promise<any>;
    /** @returns {Promise<Schemas["Health"]>} */
    health(): Promise<Schemas["Health"]>;
    /** @returns {Promise<Record<string, unknown>>} the OpenAPI document this server answers by */
    openapi(): Promise<Record<string, unknown>>;
    /**
     * A short-lived, single-use ticket that stands for the token on an event stream
     * (`/events?ticket=...`: a browser's EventSource cannot send a header).
     * @returns {Promise<Schemas["Ticket"]>}
     */
    ticket(): Promise<Schemas["Ticket"]>;
    /**
     * A URL a browser's `new EventSource(url)` can open: the stream with a fresh single-use ticket in
     * place of the token (the token never goes into a URL). Opened within the ticket's life (30 s).
     * @param {{ compat?: boolean, after?: string }} [options]
     */
    eventSourceUrl(options?: {
        compat?: boolean;
        after?: string;
    }): Promise<string>;
    /**
     * Any protocol request (`{"type": "close", ...}`; `lease_ms` with a `start_run`).
     * @param {Schemas["AnyRequest"]} request
     * @returns {Promise<any>}
     */
    submit(request: Schemas["AnyRequest"]): Promise<any>;
    /**
     * Start a run the client owns (an external run).
     * @param {StartBody} body
     * @returns {Promise<Started>}
     */
    startRun(body: StartBody): Promise<Started>;
    /**
     * One report of an external run; sent again after a timeout when `retriable(report)`.
     * @param {string} runId
     * @param {Report} report
     * @returns {Promise<Schemas["ReportOutcome"]>}
     */
    report(runId: string, report: Report): Promise<Schemas["ReportOutcome"]>;
    /**
     * @param {string} runId
     * @param {Schemas["CancelRunBody"]} [body]
     * @returns {Promise<Schemas["RequestOutcome"]>}
     */
    cancel(runId: string, body?: Schemas["CancelRunBody"]): Promise<Schemas["RequestOutcome"]>;
    /**
     * @param {string} runId
     * @returns {Promise<Schemas["RunSnapshot"]>}
     */
    run(runId: string): Promise<Schemas["RunSnapshot"]>;
    /**
     * @param {string} session
     * @returns {Promise<Schemas["SessionSnapshot"]>}
     */
    session(session: string): Promise<Schemas["SessionSnapshot"]>;
    /**
     * Stop a whole session: its queued runs end unstarted, its active run is interrupted, all with one
     * action id (the answer's `action_id`; `interrupted_runs` lists them). An idle session: nothing.
     * @param {string} session
     * @param {Schemas["CancelSessionBody"]} [body] `origin`, `reason`, `grace_ms` (then abandoned)
     * @returns {Promise<Schemas["RequestOutcome"]>}
     */
    cancelSession(session: string, body?: Schemas["CancelSessionBody"]): Promise<Schemas["RequestOutcome"]>;
    /**
     * Forget a session (its queue policy, its always grants). A busy one is refused (a WireError,
     * 409 `session_busy`) unless `confirm`: then it is stopped first, and forgotten once its run ends.
     * @param {string} session
     * @param {SessionDelete} [options]
     * @returns {Promise<Schemas["RequestOutcome"]>}
     */
    deleteSession(session: string, options?: SessionDelete): Promise<Schemas["RequestOutcome"]>;
    /**
     * @param {string} session
     * @param {Schemas["QueuePolicy"]} queuePolicy
     * @returns {Promise<Schemas["RequestOutcome"]>}
     */
    setQueuePolicy(session: string, queuePolicy: Schemas["QueuePolicy"]): Promise<Schemas["RequestOutcome"]>;
    /**
     * Open asks, in the order raised (of one run, or all).
     * @param {string} [runId]
     * @returns {Promise<Schemas["AskSnapshot"][]>}
     */
    asks(runId?: string): Promise<Schemas["AskSnapshot"][]>;
    /**
     * `{ approved: true, always: true }` also grants the ask's `key` for the rest of its session: its
     * open asks with that key are approved now, later ones as they are asked.
     * @param {string} askId
     * @param {Schemas["ReplyPermissionBody"]} body
     * @returns {Promise<Schemas["RequestOutcome"]>}
     */
    replyPermission(askId: string, body: Schemas["ReplyPermissionBody"]): Promise<Schemas["RequestOutcome"]>;
    /**
     * @param {string} askId
     * @param {Schemas["AnswerFormBody"]} body
     * @returns {Promise<Schemas["RequestOutcome"]>}
     */
    answerForm(askId: string, body: Schemas["AnswerFormBody"]): Promise<Schemas["RequestOutcome"]>;
    /**
     * @param {string} askId
     * @param {Schemas["DismissFormBody"]} [body]
     * @returns {Promise<Schemas["RequestOutcome"]>}
     */
    dismissForm(askId: string, body?: Schemas["DismissFormBody"]): Promise<Schemas["RequestOutcome"]>;
    /**
     * The same three for a run with exactly one open ask of that kind.
     * @param {string} runId
     * @param {"permission" | "form" | "form/dismiss"} what
     * @param {Schemas["ReplyPermissionBody"] | Schemas["AnswerFormBody"] | Schemas["DismissFormBody"]} body
     * @returns {Promise<Schemas["RequestOutcome"]>}
     */
    answerRun(runId: string, what: "permission" | "form" | "form/dismiss", body: Schemas["ReplyPermissionBody"] | Schemas["AnswerFormBody"] | Schemas["DismissFormBody"]): Promise<Schemas["RequestOutcome"]>;
    /**
     * Any close in any mode.
     * @param {Schemas["CloseRequestBody"]} body
     * @returns {Promise<Schemas["CloseOutcome"]>}
     */
    close(body: Schemas["CloseRequestBody"]): Promise<Schemas["CloseOutcome"]>;
    /**
     * @param {Schemas["ShutdownBody"]} [body]
     * @returns {Promise<Schemas["CloseOutcome"]>}
     */
    shutdown(body?: Schemas["ShutdownBody"]): Promise<Schemas["CloseOutcome"]>;
    /**
     * Declare directories, and load them unless `load` is false.
     * @param {string[]} directories
     * @param {{ load?: boolean }} [options]
     * @returns {Promise<Schemas["DirectoriesAnswer"]>}
     */
    directories(directories: string[], options?: {
        load?: boolean;
    }): Promise<Schemas["DirectoriesAnswer"]>;
    /** @returns {Promise<Schemas["ActionSnapshot"][]>} pending close actions */
    actions(): Promise<Schemas["ActionSnapshot"][]>;
    /**
     * Turn a pending maintenance close into a confirmed one (its blocking runs are interrupted).
     * @param {string} actionId
     * @param {Schemas["ConfirmCloseBody"]} [body]
     * @returns {Promise<Schemas["CloseOutcome"]>}
     */
    confirm(actionId: string, body?: Schemas["ConfirmCloseBody"]): Promise<Schemas["CloseOutcome"]>;
    /** @returns {Promise<Schemas["HostStatistics"]>} */
    statistics(): Promise<Schemas["HostStatistics"]>;
    /**
     * Seed 002's compatible closes (`POST /global/dispose`, `/instance/dispose`, `/instance/reload`):
     * upstream's shapes, for upstream clients.
     * @param {"global/dispose" | "instance/dispose" | "instance/reload"} route
     * @param {CompatOptions} [options]
     * @returns {Promise<Schemas["CompatCloseAnswer"]>}
     */
    compatClose(route: "global/dispose" | "instance/dispose" | "instance/reload", options?: CompatOptions): Promise<Schemas["CompatCloseAnswer"]>;
    /** @returns {Promise<Schemas["HooksState"]>} the cache registrations (caches kept out of process) */
    hooks(): Promise<Schemas["HooksState"]>;
    /**
     * Register for the caches' load and dispose requests (`instance.load_requested`,
     * `instance.dispose_requested` on the event stream; acknowledge each with `ackHook`).
     * @param {Schemas["HooksRegisterBody"]} [body]
     * @returns {Promise<Schemas["HooksRegistered"]>}
     */
    registerHooks(body?: Schemas["HooksRegisterBody"]): Promise<Schemas["HooksRegistered"]>;
    /**
     * @param {string} requestId the request's `request_id`
     * @param {Schemas["HookAckBody"]} [body] `error`: the load or dispose failed, and why
     * @returns {Promise<Schemas["CacheAck"]>}
     */
    ackHook(requestId: string, body?: Schemas["HookAckBody"]): Promise<Schemas["CacheAck"]>;
    /**
     * @param {string} registration
     * @returns {Promise<Schemas["HooksUnregistered"]>}
     */
    unregisterHooks(registration: string): Promise<Schemas["HooksUnregistered"]>;
    /**
     * Renew the registration's lease (`lease_ms` of the registration's answer; any `ackHook` renews it too).
     * @param {string} registration
     * @returns {Promise<Schemas["HooksRenewed"]>}
     */
    renewHooks(registration: string): Promise<Schemas["HooksRenewed"]>;
    /**
     * The event stream (`GET /events`), resumed across drops and restarts with Last-Event-ID.
     * @param {StreamOptions & { compat?: boolean }} [options] `compat`: seed 002's `GET /event`
     * @returns {AsyncGenerator<Item, void, undefined>}
     */
    stream(options?: StreamOptions & {
        compat?: boolean;
    }): AsyncGenerator<Item, void, undefined>;
    /**
     * A feed over the event stream: many waiters, one connection.
     * @param {StreamOptions & { compat?: boolean, keep?: number, onReset?: (reset: Schemas["StreamReset"]) => void }} [options]
     */
    feed(options?: StreamOptions & {
        compat?: boolean;
        keep?: number;
        onReset?: (reset: Schemas["StreamReset"]) => void;
    }): EventFeed;
}
export type Schemas = import("../types/openapi.js").components["schemas"];
export type Report = Schemas["ExternalReport"];
export type Item = import("./events.js").Item;
export type StreamOptions = import("./events.js").StreamOptions;
export type StartBody = Schemas["StartRunBody"];
export type Started = Schemas["StartedRun"];
export type CompatOptions = {
    mode?: Schemas["CloseMode"];
    kind?: string;
    id?: string;
    directory?: string;
};
export type SessionDelete = NonNullable<import("../types/openapi.js").operations["delete_session"]["parameters"]["query"]>;
export type ClientOptions = {
    /**
     * the server's address (the ready line's `url`)
     */
    url: string;
    /**
     * the bearer token (the ready line's `token`, or the one you gave serve)
     */
    token?: string | undefined;
    /**
     * each request's bound (default 10,000 ms)
     */
    timeoutMs?: number | undefined;
    /**
     * how many times a request that may be repeated is sent again after a
     * timeout, a dropped connection or a 504 (default 2): GETs, and reports that `retriable` accepts
     */
    retries?: number | undefined;
    fetch?: typeof fetch | undefined;
};
import { EventFeed } from "./events.js";
