// The HTTP client: one method per route of `run-supervisor serve`, typed from the OpenAPI document.

import { EventFeed, readStream, sleep } from "./events.js";

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
  constructor(what, status, answer) {
    const code = answer && typeof answer === "object" ? answer.code : undefined;
    const error = answer && typeof answer === "object" ? answer.error : String(answer);
    super(`${what}: ${status} ${code ?? ""}: ${error ?? ""}`);
    this.name = "WireError";
    this.status = status;
    /** @type {Schemas["RejectCode"] | undefined} */
    this.code = code;
    this.answer = answer;
  }
}

/**
 * A report that may be sent again after a timeout without doing anything twice: the server answers a
 * repeat of the run's previous report as it did the first (see docs/wire.md, retries). A `pending`
 * part without `call_id` or a step without `step` id begins a new one, so it is not retried.
 * @param {Report} report
 */
export function retriable(report) {
  if (report.type === "part") return report.state !== "pending" || !!report.call_id;
  if (report.type === "step") return !!report.step;
  return true;
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
  constructor(options) {
    this.url = options.url.endsWith("/") ? options.url : `${options.url}/`;
    this.token = options.token;
    this.timeoutMs = options.timeoutMs ?? 10000;
    this.retries = options.retries ?? 2;
    this.fetch = options.fetch ?? globalThis.fetch;
  }

  /** @param {Record<string, string>} [extra] */
  headers(extra = {}) {
    /** @type {Record<string, string>} */
    const headers = { ...extra };
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    return headers;
  }

  /**
   * Any route: the parsed answer, or a WireError for a status of 400 and above.
   * @param {"GET" | "POST" | "PUT" | "DELETE"} method
   * @param {string} path relative, e.g. `runs/r1/reports`
   * @param {{ body?: unknown, headers?: Record<string, string>, retry?: boolean, signal?: AbortSignal }} [options]
   * @returns {Promise<any>}
   */
  async call(method, path, options = {}) {
    const retry = options.retry ?? method === "GET";
    for (let attempt = 0; ; attempt++) {
      const signals = [AbortSignal.timeout(this.timeoutMs)];
      if (options.signal) signals.push(options.signal);
      try {
        const response = await this.fetch(new URL(path, this.url), {
          method,
          headers: this.headers({ ...(options.body !== undefined ? { "Content-Type": "application/json" } : {}), ...options.headers }),
          body: options.body === undefined ? undefined : JSON.stringify(options.body),
          signal: AbortSignal.any(signals),
        });
        const text = await response.text();
        const answer = text ? JSON.parse(text) : null;
        if (response.status === 504 && retry && attempt < this.retries) continue;
        if (response.status >= 400) throw new WireError(`${method} /${path}`, response.status, answer);
        return answer;
      } catch (error) {
        if (error instanceof WireError || options.signal?.aborted || !retry || attempt >= this.retries) throw error;
        await sleep(Math.min(50 * 2 ** attempt, 1000)); // a timeout or a dropped connection: again
      }
    }
  }

  /** @returns {Promise<Schemas["Health"]>} */
  health() { return this.call("GET", "health"); }

  /** @returns {Promise<Record<string, unknown>>} the OpenAPI document this server answers by */
  openapi() { return this.call("GET", "openapi.json"); }

  /**
   * A short-lived, single-use ticket that stands for the token on an event stream
   * (`/events?ticket=...`: a browser's EventSource cannot send a header).
   * @returns {Promise<Schemas["Ticket"]>}
   */
  ticket() { return this.call("POST", "events/ticket", { body: {} }); }

  /**
   * A URL a browser's `new EventSource(url)` can open: the stream with a fresh single-use ticket in
   * place of the token (the token never goes into a URL). Opened within the ticket's life (30 s).
   * @param {{ compat?: boolean, after?: string }} [options]
   */
  async eventSourceUrl(options = {}) {
    const { ticket } = await this.ticket();
    const url = new URL(options.compat ? "event" : "events", this.url);
    url.searchParams.set("ticket", ticket);
    if (options.after !== undefined) url.searchParams.set("after", options.after);
    return url.toString();
  }

  /**
   * Any protocol request (`{"type": "close", ...}`; `lease_ms` with a `start_run`).
   * @param {Schemas["AnyRequest"]} request
   * @returns {Promise<any>}
   */
  submit(request) { return this.call("POST", "requests", { body: request }); }

  /**
   * Start a run the client owns (an external run).
   * @param {StartBody} body
   * @returns {Promise<Started>}
   */
  startRun(body) { return this.call("POST", "runs", { body }); }

  /**
   * One report of an external run; sent again after a timeout when `retriable(report)`.
   * @param {string} runId
   * @param {Report} report
   * @returns {Promise<Schemas["ReportOutcome"]>}
   */
  report(runId, report) {
    return this.call("POST", `runs/${enc(runId)}/reports`, { body: report, retry: retriable(report) });
  }

  /**
   * @param {string} runId
   * @param {Schemas["CancelRunBody"]} [body]
   * @returns {Promise<Schemas["RequestOutcome"]>}
   */
  cancel(runId, body = {}) { return this.call("POST", `runs/${enc(runId)}/cancel`, { body }); }

  /**
   * @param {string} runId
   * @returns {Promise<Schemas["RunSnapshot"]>}
   */
  run(runId) { return this.call("GET", `runs/${enc(runId)}`); }

  /**
   * @param {string} session
   * @returns {Promise<Schemas["SessionSnapshot"]>}
   */
  session(session) { return this.call("GET", `sessions/${enc(session)}`); }

  /**
   * Stop a whole session: its queued runs end unstarted, its active run is interrupted, all with one
   * action id (the answer's `action_id`; `interrupted_runs` lists them). An idle session: nothing.
   * @param {string} session
   * @param {Schemas["CancelSessionBody"]} [body] `origin`, `reason`, `grace_ms` (then abandoned)
   * @returns {Promise<Schemas["RequestOutcome"]>}
   */
  cancelSession(session, body = {}) { return this.call("POST", `sessions/${enc(session)}/cancel`, { body }); }

  /**
   * Forget a session (its queue policy, its always grants). A busy one is refused (a WireError,
   * 409 `session_busy`) unless `confirm`: then it is stopped first, and forgotten once its run ends.
   * @param {string} session
   * @param {SessionDelete} [options]
   * @returns {Promise<Schemas["RequestOutcome"]>}
   */
  deleteSession(session, options = {}) {
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(options)) if (value !== undefined && value !== null) query.set(name, String(value));
    const q = query.toString(); // not query.size: older browsers (a renderer) lack it
    return this.call("DELETE", `sessions/${enc(session)}${q ? `?${q}` : ""}`);
  }

  /**
   * @param {string} session
   * @param {Schemas["QueuePolicy"]} queuePolicy
   * @returns {Promise<Schemas["RequestOutcome"]>}
   */
  setQueuePolicy(session, queuePolicy) {
    return this.call("PUT", `sessions/${enc(session)}/queue_policy`, { body: { queue_policy: queuePolicy } });
  }

  /**
   * Open asks, in the order raised (of one run, or all).
   * @param {string} [runId]
   * @returns {Promise<Schemas["AskSnapshot"][]>}
   */
  asks(runId) { return this.call("GET", runId === undefined ? "asks" : `asks?run_id=${enc(runId)}`); }

  /**
   * `{ approved: true, always: true }` also grants the ask's `key` for the rest of its session: its
   * open asks with that key are approved now, later ones as they are asked.
   * @param {string} askId
   * @param {Schemas["ReplyPermissionBody"]} body
   * @returns {Promise<Schemas["RequestOutcome"]>}
   */
  replyPermission(askId, body) { return this.call("POST", `asks/${enc(askId)}/permission`, { body }); }

  /**
   * @param {string} askId
   * @param {Schemas["AnswerFormBody"]} body
   * @returns {Promise<Schemas["RequestOutcome"]>}
   */
  answerForm(askId, body) { return this.call("POST", `asks/${enc(askId)}/form`, { body }); }

  /**
   * @param {string} askId
   * @param {Schemas["DismissFormBody"]} [body]
   * @returns {Promise<Schemas["RequestOutcome"]>}
   */
  dismissForm(askId, body = {}) { return this.call("POST", `asks/${enc(askId)}/dismiss`, { body }); }

  /**
   * The same three for a run with exactly one open ask of that kind.
   * @param {string} runId
   * @param {"permission" | "form" | "form/dismiss"} what
   * @param {Schemas["ReplyPermissionBody"] | Schemas["AnswerFormBody"] | Schemas["DismissFormBody"]} body
   * @returns {Promise<Schemas["RequestOutcome"]>}
   */
  answerRun(runId, what, body) { return this.call("POST", `runs/${enc(runId)}/${what}`, { body }); }

  /**
   * Any close in any mode.
   * @param {Schemas["CloseRequestBody"]} body
   * @returns {Promise<Schemas["CloseOutcome"]>}
   */
  close(body) { return this.call("POST", "close", { body }); }

  /**
   * @param {Schemas["ShutdownBody"]} [body]
   * @returns {Promise<Schemas["CloseOutcome"]>}
   */
  shutdown(body = {}) { return this.call("POST", "shutdown", { body }); }

  /**
   * Declare directories, and load them unless `load` is false.
   * @param {string[]} directories
   * @param {{ load?: boolean }} [options]
   * @returns {Promise<Schemas["DirectoriesAnswer"]>}
   */
  directories(directories, options = {}) {
    return this.call("POST", "directories", { body: { directories, load: options.load ?? true } });
  }

  /** @returns {Promise<Schemas["ActionSnapshot"][]>} pending close actions */
  actions() { return this.call("GET", "actions"); }

  /**
   * Turn a pending maintenance close into a confirmed one (its blocking runs are interrupted).
   * @param {string} actionId
   * @param {Schemas["ConfirmCloseBody"]} [body]
   * @returns {Promise<Schemas["CloseOutcome"]>}
   */
  confirm(actionId, body = {}) { return this.call("POST", `actions/${enc(actionId)}/confirm`, { body }); }

  /** @returns {Promise<Schemas["HostStatistics"]>} */
  statistics() { return this.call("GET", "statistics"); }

  /**
   * Seed 002's compatible closes (`POST /global/dispose`, `/instance/dispose`, `/instance/reload`):
   * upstream's shapes, for upstream clients.
   * @param {"global/dispose" | "instance/dispose" | "instance/reload"} route
   * @param {CompatOptions} [options]
   * @returns {Promise<Schemas["CompatCloseAnswer"]>}
   */
  compatClose(route, options = {}) {
    const query = new URLSearchParams();
    if (options.directory) query.set("directory", options.directory);
    if (options.mode) query.set("mode", options.mode);
    /** @type {Record<string, string>} */
    const headers = {};
    if (options.kind) headers["x-opencode-client-action-kind"] = options.kind;
    if (options.id) headers["x-opencode-client-action-id"] = options.id;
    const q = query.toString();
    const tail = q ? `?${q}` : "";
    return this.call("POST", `${route}${tail}`, { body: {}, headers });
  }

  /** @returns {Promise<Schemas["HooksState"]>} the cache registrations (caches kept out of process) */
  hooks() { return this.call("GET", "instances/hooks"); }

  /**
   * Register for the caches' load and dispose requests (`instance.load_requested`,
   * `instance.dispose_requested` on the event stream; acknowledge each with `ackHook`).
   * @param {Schemas["HooksRegisterBody"]} [body]
   * @returns {Promise<Schemas["HooksRegistered"]>}
   */
  registerHooks(body = {}) { return this.call("POST", "instances/hooks", { body }); }

  /**
   * @param {string} requestId the request's `request_id`
   * @param {Schemas["HookAckBody"]} [body] `error`: the load or dispose failed, and why
   * @returns {Promise<Schemas["CacheAck"]>}
   */
  ackHook(requestId, body = {}) {
    return this.call("POST", `instances/hooks/acks/${enc(requestId)}`, { body, retry: true });
  }

  /**
   * @param {string} registration
   * @returns {Promise<Schemas["HooksUnregistered"]>}
   */
  unregisterHooks(registration) { return this.call("DELETE", `instances/hooks/${enc(registration)}`); }

  /**
   * Renew the registration's lease (`lease_ms` of the registration's answer; any `ackHook` renews it too).
   * @param {string} registration
   * @returns {Promise<Schemas["HooksRenewed"]>}
   */
  renewHooks(registration) { return this.call("POST", `instances/hooks/${enc(registration)}/renew`, { retry: true }); }

  /**
   * The event stream (`GET /events`), resumed across drops and restarts with Last-Event-ID.
   * @param {StreamOptions & { compat?: boolean }} [options] `compat`: seed 002's `GET /event`
   * @returns {AsyncGenerator<Item, void, undefined>}
   */
  stream(options = {}) {
    const path = options.compat ? "event" : "events";
    return readStream(
      (lastId, signal) =>
        this.fetch(new URL(path, this.url), {
          headers: this.headers(lastId === null ? {} : { "Last-Event-ID": lastId }),
          signal,
        }),
      options,
    );
  }

  /**
   * A feed over the event stream: many waiters, one connection.
   * @param {StreamOptions & { compat?: boolean, keep?: number, onReset?: (reset: Schemas["StreamReset"]) => void }} [options]
   */
  feed(options = {}) {
    const stop = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, stop.signal]) : stop.signal;
    return new EventFeed(this.stream({ ...options, signal }), { ...options, close: () => stop.abort() });
  }
}

/** @param {string} part */
const enc = (part) => encodeURIComponent(part);
