/** @typedef {import("../types/openapi.js").components["schemas"]} Schemas */
/** @typedef {import("./events.js").Item} Item */
export class StdioClient {
    /**
     * Spawn `run-supervisor stdio` (`args`: its options) and read its lines.
     * @param {{ command?: string, args?: string[], env?: NodeJS.ProcessEnv, timeoutMs?: number, keep?: number }} [options]
     */
    static spawn(options?: {
        command?: string;
        args?: string[];
        env?: NodeJS.ProcessEnv;
        timeoutMs?: number;
        keep?: number;
    }): StdioClient;
    /**
     * @param {import("node:child_process").ChildProcessWithoutNullStreams | import("node:child_process").ChildProcess} child
     * @param {{ timeoutMs?: number, keep?: number }} [options]
     */
    constructor(child: import("node:child_process").ChildProcessWithoutNullStreams | import("node:child_process").ChildProcess, options?: {
        timeoutMs?: number;
        keep?: number;
    });
    child: import("child_process").ChildProcess | import("child_process").ChildProcessWithoutNullStreams;
    timeoutMs: number;
    nextId: number;
    /** @type {Map<number, { resolve: (line: any) => void, reject: (error: Error) => void }>} */
    pending: Map<number, {
        resolve: (line: any) => void;
        reject: (error: Error) => void;
    }>;
    /** @type {{ type: "error", id: unknown, status: number, code: Schemas["RejectCode"], error: string }[]} error lines of no request of ours (id null) */
    errors: {
        type: "error";
        id: unknown;
        status: number;
        code: Schemas["RejectCode"];
        error: string;
    }[];
    /** @type {Record<string, unknown> | null} a ready line, if the sidecar writes one */
    ready: Record<string, unknown> | null;
    /** @type {Promise<number | null>} */
    exited: Promise<number | null>;
    /** Every event the sidecar writes, from its first (one feed: stdout is one stream). */
    feed: EventFeed;
    /**
     * Send one operation; its answer, or a WireError for a status of 400 and above (an `error` line too).
     * @param {Record<string, unknown> & { type: string }} operation
     * @returns {Promise<any>}
     */
    send(operation: Record<string, unknown> & {
        type: string;
    }): Promise<any>;
    /**
     * @param {import("./http.js").StartBody} body
     * @returns {Promise<import("./http.js").Started>}
     */
    startRun(body: import("./http.js").StartBody): Promise<import("./http.js").Started>;
    /**
     * @param {string} runId
     * @param {Schemas["ExternalReport"]} report
     * @returns {Promise<Schemas["ReportOutcome"]>}
     */
    report(runId: string, report: Schemas["ExternalReport"]): Promise<Schemas["ReportOutcome"]>;
    /**
     * @param {string} runId
     * @param {Schemas["CancelRunBody"]} [body]
     * @returns {Promise<Schemas["RequestOutcome"]>}
     */
    cancel(runId: string, body?: Schemas["CancelRunBody"]): Promise<Schemas["RequestOutcome"]>;
    /**
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
     * Seed 002's closes over stdio (`global.dispose`, `instance.dispose`, `instance.reload`), answered
     * in upstream's shape as on HTTP.
     * @param {"global/dispose" | "instance/dispose" | "instance/reload"} route
     * @param {import("./http.js").CompatOptions} [options]
     * @returns {Promise<Schemas["CompatCloseAnswer"]>}
     */
    compatClose(route: "global/dispose" | "instance/dispose" | "instance/reload", options?: import("./http.js").CompatOptions): Promise<Schemas["CompatCloseAnswer"]>;
    /**
     * @param {string} actionId
     * @param {Schemas["ConfirmCloseBody"]} [body]
     * @returns {Promise<Schemas["CloseOutcome"]>}
     */
    confirm(actionId: string, body?: Schemas["ConfirmCloseBody"]): Promise<Schemas["CloseOutcome"]>;
    /**
     * @param {string[]} directories
     * @param {{ load?: boolean }} [options]
     * @returns {Promise<Schemas["DirectoriesAnswer"]>}
     */
    directories(directories: string[], options?: {
        load?: boolean;
    }): Promise<Schemas["DirectoriesAnswer"]>;
    /**
     * @param {string} session
     * @param {Schemas["CancelSessionBody"]} [body]
     * @returns {Promise<Schemas["RequestOutcome"]>}
     */
    cancelSession(session: string, body?: Schemas["CancelSessionBody"]): Promise<Schemas["RequestOutcome"]>;
    /**
     * @param {string} session
     * @param {import("./http.js").SessionDelete} [options]
     * @returns {Promise<Schemas["RequestOutcome"]>}
     */
    deleteSession(session: string, options?: import("./http.js").SessionDelete): Promise<Schemas["RequestOutcome"]>;
    /**
     * @param {string} session
     * @param {Schemas["QueuePolicy"]} queuePolicy
     * @returns {Promise<Schemas["RequestOutcome"]>}
     */
    setQueuePolicy(session: string, queuePolicy: Schemas["QueuePolicy"]): Promise<Schemas["RequestOutcome"]>;
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
     * @param {string} [runId]
     * @returns {Promise<Schemas["AskSnapshot"][]>}
     */
    asks(runId?: string): Promise<Schemas["AskSnapshot"][]>;
    /** @returns {Promise<Schemas["ActionSnapshot"][]>} */
    actions(): Promise<Schemas["ActionSnapshot"][]>;
    /** @returns {Promise<Omit<Schemas["HostStatistics"], "external_runs" | "sse_listeners" | "events_buffered">>} */
    statistics(): Promise<Omit<Schemas["HostStatistics"], "external_runs" | "sse_listeners" | "events_buffered">>;
    /** @returns {Promise<Schemas["HooksState"]>} the cache registrations (caches kept out of process) */
    hooks(): Promise<Schemas["HooksState"]>;
    /**
     * @param {Schemas["HooksRegisterBody"]} [body]
     * @returns {Promise<Schemas["HooksRegistered"]>}
     */
    registerHooks(body?: Schemas["HooksRegisterBody"]): Promise<Schemas["HooksRegistered"]>;
    /**
     * @param {string} requestId
     * @param {Schemas["HookAckBody"]} [body]
     * @returns {Promise<Schemas["CacheAck"]>}
     */
    ackHook(requestId: string, body?: Schemas["HookAckBody"]): Promise<Schemas["CacheAck"]>;
    /**
     * @param {string} registration
     * @returns {Promise<Schemas["HooksUnregistered"]>}
     */
    unregisterHooks(registration: string): Promise<Schemas["HooksUnregistered"]>;
    /**
     * @param {string} registration
     * @returns {Promise<Schemas["HooksRenewed"]>}
     */
    renewHooks(registration: string): Promise<Schemas["HooksRenewed"]>;
    /**
     * Close stdin (a shutdown, origin `stdin.closed`) and wait for the exit; SIGKILL past `ms`.
     * @param {number} [ms]
     */
    stop(ms?: number): Promise<number | null>;
}
export type Schemas = import("../types/openapi.js").components["schemas"];
export type Item = import("./events.js").Item;
import { EventFeed } from "./events.js";
