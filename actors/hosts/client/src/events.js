// Event streams: an SSE reader that resumes with Last-Event-ID across drops and restarts, and a feed
// that lets many waiters share one stream (wait for the first event that matches, bounded).

/** @typedef {import("../types/openapi.js").components["schemas"]} Schemas */
/** @typedef {Schemas["StreamEvent"] | Schemas["CompatStreamEvent"]} WireEvent  what `GET /events` and `GET /event` send */
/** @typedef {Schemas["StreamReset"]} StreamReset */
/** @typedef {{ id: string | null, event: WireEvent }} Item  the event and its id (a reset has none) */

/**
 * An event id is "<epoch>:<seq>" or "<epoch>:<seq>.<n>" (a host event after supervisor event seq).
 * @param {string | null | undefined} id
 * @returns {{ epoch: string, seq: number, sub: number } | null}
 */
export function parseEventId(id) {
  const match = /^([A-Za-z0-9]+):([0-9]{1,20})(?:\.([0-9]{1,20}))?$/.exec(id ?? "");
  if (!match) return null;
  return { epoch: match[1] ?? "", seq: Number(match[2]), sub: Number(match[3] ?? 0) };
}

/**
 * Split a byte stream of server-sent events into {id, data, retry} blocks.
 * @param {AsyncIterable<Uint8Array>} body
 * @returns {AsyncGenerator<{ id: string | null, data: string | null, retry: number | null }>}
 */
export async function* sseBlocks(body) {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of body) {
    buffer += decoder.decode(chunk, { stream: true }).replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      /** @type {string | null} */
      let id = null;
      /** @type {number | null} */
      let retry = null;
      const data = [];
      for (const line of block.split("\n")) {
        const colon = line.indexOf(":");
        if (colon === 0) continue; // a comment (": keepalive")
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "id") id = value;
        else if (field === "data") data.push(value);
        else if (field === "retry" && /^[0-9]+$/.test(value)) retry = Number(value);
      }
      yield { id, data: data.length ? data.join("\n") : null, retry };
    }
  }
}

/**
 * @typedef {object} StreamOptions
 * @property {string | null} [after] resume after this id ("0": the server's whole buffer; null: live events only)
 * @property {AbortSignal} [signal] stops the stream (the generator returns)
 * @property {number} [retryMs] wait before reconnecting (the server's `retry:` wins; default 1000)
 * @property {(error: unknown) => void} [onDrop] told of each dropped or refused connection
 */

/**
 * Read an event stream for ever: on a drop or a refused connection it reconnects with the last id
 * it has (`Last-Event-ID`), so no event is lost or repeated while the server's buffer holds the gap.
 * When the server cannot resume (`stream.reset`: `evicted`, `unknown_id`, `other_epoch` after a
 * restart) the reset is yielded like an event, with no id: re-read state, then go on.
 * @param {(lastId: string | null, signal: AbortSignal) => Promise<Response>} open
 * @param {StreamOptions} [options]
 * @returns {AsyncGenerator<Item, void, undefined>}
 */
export async function* readStream(open, options = {}) {
  const outer = options.signal ?? new AbortController().signal;
  let lastId = options.after ?? null;
  let retryMs = options.retryMs ?? 1000;
  while (!outer.aborted) {
    const connection = new AbortController();
    const stop = () => connection.abort();
    outer.addEventListener("abort", stop, { once: true });
    try {
      const response = await open(lastId, connection.signal);
      if (!response.ok || !response.body) {
        const text = await response.text().catch(() => "");
        throw new Error(`event stream: ${response.status} ${text.slice(0, 200)}`);
      }
      for await (const block of sseBlocks(response.body)) {
        if (block.retry !== null && options.retryMs === undefined) retryMs = block.retry;
        if (block.data === null) continue;
        /** @type {WireEvent} */
        const event = JSON.parse(block.data);
        if (block.id !== null) lastId = block.id;
        else if (event.type === "stream.reset") lastId = null; // the replay that follows carries ids
        yield { id: block.id, event };
      }
      if (!outer.aborted) options.onDrop?.(new Error("event stream ended"));
    } catch (error) {
      if (outer.aborted) return;
      options.onDrop?.(error);
    } finally {
      outer.removeEventListener("abort", stop);
      connection.abort();
    }
    if (outer.aborted) return;
    await sleep(retryMs, outer);
  }
}

/**
 * @param {number} ms
 * @param {AbortSignal} [signal]
 * @returns {Promise<void>}
 */
export function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** A wait that did not see its event in time. */
export class WaitTimeout extends Error {
  /** @param {string} what */
  constructor(what) {
    super(what);
    this.name = "WaitTimeout";
  }
}

/**
 * Many readers of one stream: `waitFor` resolves with the first event that matches (among those seen
 * already, then those to come), bounded by its timeout; `on` calls a listener for each event.
 * Keeps the last `keep` events.
 */
export class EventFeed {
  /**
   * @param {AsyncIterable<Item>} items
   * @param {{ keep?: number, onReset?: (reset: StreamReset) => void, close?: () => void }} [options]
   */
  constructor(items, options = {}) {
    /** Stop reading (the stream's connection is closed; waiters are rejected). */
    this.close = options.close ?? (() => {});
    /** @type {Item[]} */
    this.seen = [];
    this.keep = options.keep ?? 10000;
    /** @type {Set<(item: Item) => void>} */
    this.listeners = new Set();
    /** @type {string | null} the id of the last event read */
    this.lastId = null;
    /** @type {string | null} the server's life the ids belong to */
    this.epoch = null;
    /** @type {unknown} why the stream ended, if it did */
    this.ended = undefined;
    const onReset = options.onReset;
    this.done = (async () => {
      try {
        for await (const item of items) {
          if (item.event.type === "stream.reset") {
            this.epoch = item.event.epoch;
            onReset?.(item.event);
          } else if (item.id !== null) {
            this.lastId = item.id;
            this.epoch = parseEventId(item.id)?.epoch ?? this.epoch;
          }
          this.seen.push(item);
          if (this.seen.length > this.keep) this.seen.splice(0, this.seen.length - this.keep);
          for (const listener of [...this.listeners]) listener(item);
        }
        this.ended = null;
      } catch (error) {
        this.ended = error;
      }
      for (const listener of [...this.listeners]) listener({ id: null, event: ENDED });
    })();
  }

  /**
   * @param {(item: Item) => void} listener
   * @returns {() => void} removes it
   */
  on(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * The first event `match` accepts: one seen already (unless `fresh`), else the next.
   * @template {WireEvent} T
   * @param {(event: WireEvent) => event is T} match
   * @param {{ timeoutMs?: number, signal?: AbortSignal, fresh?: boolean, what?: string }} [options]
   * @returns {Promise<T>}
   */
  waitFor(match, options = {}) {
    if (!options.fresh) {
      const hit = this.seen.find((item) => match(item.event));
      if (hit) return Promise.resolve(/** @type {T} */ (hit.event));
    }
    const ms = options.timeoutMs ?? 10000;
    const what = options.what ?? "a matching event";
    return new Promise((resolve, reject) => {
      const finish = (/** @type {(() => void)} */ settle) => {
        clearTimeout(timer);
        off();
        options.signal?.removeEventListener("abort", aborted);
        settle();
      };
      const aborted = () => finish(() => reject(options.signal?.reason ?? new Error("aborted")));
      const timer = setTimeout(() => finish(() => reject(new WaitTimeout(`no ${what} within ${ms} ms`))), ms);
      const off = this.on((item) => {
        if (item.event === ENDED) finish(() => reject(new Error(`the event stream ended before ${what}`)));
        else if (match(item.event)) finish(() => resolve(/** @type {T} */ (item.event)));
      });
      options.signal?.addEventListener("abort", aborted, { once: true });
    });
  }
}

/** Told to listeners when the stream has ended (never yielded to a reader). */
const ENDED = /** @type {WireEvent} */ (/** @type {unknown} */ ({ type: "feed.ended" }));

/**
 * A matcher for `waitFor`: the event of that type whose fields equal `fields`.
 * @template {WireEvent["type"]} K
 * @param {K} type
 * @param {Partial<Extract<WireEvent, { type: K }>>} [fields]
 * @returns {(event: WireEvent) => event is Extract<WireEvent, { type: K }>}
 */
export function eventOf(type, fields = {}) {
  return /** @type {(event: WireEvent) => event is Extract<WireEvent, { type: K }>} */ (
    (event) =>
      event.type === type &&
      Object.entries(fields).every(([key, value]) => /** @type {Record<string, unknown>} */ (event)[key] === value)
  );
}
