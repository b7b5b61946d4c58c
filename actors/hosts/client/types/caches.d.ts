/** @typedef {import("../types/openapi.js").components["schemas"]} Schemas */
/** @typedef {Schemas["LoadRequested"] | Schemas["DisposeRequested"]} CacheRequest */
/**
 * What the host's caches need of a transport (the HTTP `Client` and the `StdioClient` both are one).
 * @typedef {object} HooksWire
 * @property {(body?: Schemas["HooksRegisterBody"]) => Promise<Schemas["HooksRegistered"]>} registerHooks
 * @property {(requestId: string, body?: Schemas["HookAckBody"]) => Promise<Schemas["CacheAck"]>} ackHook
 * @property {(registration: string) => Promise<Schemas["HooksUnregistered"]>} unregisterHooks
 * @property {(registration: string) => Promise<Schemas["HooksRenewed"]>} renewHooks
 */
/**
 * Register `load` and `dispose` for every instance (directory, generation): each is called once per
 * request and acknowledged when it returns (a throw acknowledges with its message as the error).
 * Open `feed` first (with `after: "0"` for a feed of HTTP), so no request is missed; the requests
 * outstanding at the registration (a host that restarted) are handled too. The registration's lease
 * (`leaseMs`, else the server's default) is renewed every third of it until `close()`: a host that
 * crashes is unregistered when it runs out, so later loads do not wait for it.
 * @param {HooksWire} wire
 * @param {import("./events.js").EventFeed} feed
 * @param {{ name?: string, leaseMs?: number, load: (request: Schemas["LoadRequested"]) => unknown, dispose: (request: Schemas["DisposeRequested"]) => unknown }} caches
 */
export function keepCaches(wire: HooksWire, feed: import("./events.js").EventFeed, caches: {
    name?: string;
    leaseMs?: number;
    load: (request: Schemas["LoadRequested"]) => unknown;
    dispose: (request: Schemas["DisposeRequested"]) => unknown;
}): Promise<{
    registered: {
        dispose_budget_ms: number;
        lease_ms: number | null;
        load_budget_ms: number;
        name: string | null;
        pending: (import("../types/openapi.js").components["schemas"]["LoadRequested"] | import("../types/openapi.js").components["schemas"]["DisposeRequested"])[];
        registration: string;
        replaced: string | null;
        result: "ok";
    };
    /** Stop: unregister (outstanding requests fail at once) and wait for the acknowledgements under way. */
    close(): Promise<{
        failed: string[];
        registration: string;
        result: "ok";
    }>;
}>;
export type Schemas = import("../types/openapi.js").components["schemas"];
export type CacheRequest = Schemas["LoadRequested"] | Schemas["DisposeRequested"];
/**
 * What the host's caches need of a transport (the HTTP `Client` and the `StdioClient` both are one).
 */
export type HooksWire = {
    registerHooks: (body?: Schemas["HooksRegisterBody"]) => Promise<Schemas["HooksRegistered"]>;
    ackHook: (requestId: string, body?: Schemas["HookAckBody"]) => Promise<Schemas["CacheAck"]>;
    unregisterHooks: (registration: string) => Promise<Schemas["HooksUnregistered"]>;
    renewHooks: (registration: string) => Promise<Schemas["HooksRenewed"]>;
};
