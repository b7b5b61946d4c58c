/** @typedef {import("../types/openapi.js").components["schemas"]} Schemas */
/** @typedef {Schemas["StreamEvent"] | Schemas["CompatStreamEvent"]} WireEvent  what `GET /events` and `GET /event` send */
/** @typedef {Schemas["StreamReset"]} StreamReset */
/** @typedef {{ id: string | null, event: WireEvent }} Item  the event and its id (a reset has none) */
/**
 * An event id is "<epoch>:<seq>" or "<epoch>:<seq>.<n>" (a host event after supervisor event seq).
 * @param {string | null | undefined} id
 * @returns {{ epoch: string, seq: number, sub: number } | null}
 */
export function parseEventId(id: string | null | undefined): {
    epoch: string;
    seq: number;
    sub: number;
} | null;
/**
 * Split a byte stream of server-sent events into {id, data, retry} blocks.
 * @param {AsyncIterable<Uint8Array>} body
 * @returns {AsyncGenerator<{ id: string | null, data: string | null, retry: number | null }>}
 */
export function sseBlocks(body: AsyncIterable<Uint8Array>): AsyncGenerator<{
    id: string | null;
    data: string | null;
    retry: number | null;
}>;
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
export function readStream(open: (lastId: string | null, signal: AbortSignal) => Promise<Response>, options?: StreamOptions): AsyncGenerator<Item, void, undefined>;
/**
 * @param {number} ms
 * @param {AbortSignal} [signal]
 * @returns {Promise<void>}
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void>;
/**
 * A matcher for `waitFor`: the event of that type whose fields equal `fields`.
 * @template {WireEvent["type"]} K
 * @param {K} type
 * @param {Partial<Extract<WireEvent, { type: K }>>} [fields]
 * @returns {(event: WireEvent) => event is Extract<WireEvent, { type: K }>}
 */
export function eventOf<K extends WireEvent["type"]>(type: K, fields?: Partial<Extract<WireEvent, {
    type: K;
}>>): (event: WireEvent) => event is Extract<WireEvent, {
    type: K;
}>;
/** A wait that did not see its event in time. */
export class WaitTimeout extends Error {
    /** @param {string} what */
    constructor(what: string);
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
    constructor(items: AsyncIterable<Item>, options?: {
        keep?: number;
        onReset?: (reset: StreamReset) => void;
        close?: () => void;
    });
    /** Stop reading (the stream's connection is closed; waiters are rejected). */
    close: () => void;
    /** @type {Item[]} */
    seen: Item[];
    keep: number;
    /** @type {Set<(item: Item) => void>} */
    listeners: Set<(item: Item) => void>;
    /** @type {string | null} the id of the last event read */
    lastId: string | null;
    /** @type {string | null} the server's life the ids belong to */
    epoch: string | null;
    /** @type {unknown} why the stream ended, if it did */
    ended: unknown;
    done: Promise<void>;
    /**
     * @param {(item: Item) => void} listener
     * @returns {() => void} removes it
     */
    on(listener: (item: Item) => void): () => void;
    /**
     * The first event `match` accepts: one seen already (unless `fresh`), else the next.
     * @template {WireEvent} T
     * @param {(event: WireEvent) => event is T} match
     * @param {{ timeoutMs?: number, signal?: AbortSignal, fresh?: boolean, what?: string }} [options]
     * @returns {Promise<T>}
     */
    waitFor<T extends WireEvent>(match: (event: WireEvent) => event is T, options?: {
        timeoutMs?: number;
        signal?: AbortSignal;
        fresh?: boolean;
        what?: string;
    }): Promise<T>;
}
export type Schemas = import("../types/openapi.js").components["schemas"];
/**
 * what `GET /events` and `GET /event` send
 */
export type WireEvent = Schemas["StreamEvent"] | Schemas["CompatStreamEvent"];
export type StreamReset = Schemas["StreamReset"];
/**
 * the event and its id (a reset has none)
 */
export type Item = {
    id: string | null;
    event: WireEvent;
};
export type StreamOptions = {
    /**
     * resume after this id ("0": the server's whole buffer; null: live events only)
     */
    after?: string | null | undefined;
    /**
     * stops the stream (the generator returns)
     */
    signal?: AbortSignal | undefined;
    /**
     * wait before reconnecting (the server's `retry:` wins; default 1000)
     */
    retryMs?: number | undefined;
    /**
     * told of each dropped or refused connection
     */
    onDrop?: ((error: unknown) => void) | undefined;
};
