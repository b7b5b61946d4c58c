// Caches kept out of process: the host registers for the instances' loads and disposes and
// acknowledges each (within its budget), so the supervisor's lazy-reload promise reaches its caches.

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
export async function keepCaches(wire, feed, caches) {
  /** @type {Set<string>} */
  const taken = new Set();
  /** @type {Promise<unknown>[]} */
  const running = [];
  /** @type {string | null} */
  let registration = null;
  /** @type {CacheRequest[]} requests seen before the registration's answer named ours */
  const early = [];
  /** @param {CacheRequest} request */
  const handle = (request) => {
    if (taken.has(request.request_id)) return;
    taken.add(request.request_id);
    const work = (async () => {
      try {
        await (request.type === "instance.load_requested" ? caches.load(request) : caches.dispose(request));
        await wire.ackHook(request.request_id, {});
      } catch (error) {
        await wire.ackHook(request.request_id, { error: error instanceof Error ? error.message : String(error) });
      }
    })().catch(() => {}); // unregistered meanwhile: nothing to acknowledge
    running.push(work);
  };
  const off = feed.on(({ event }) => {
    if (event.type !== "instance.load_requested" && event.type !== "instance.dispose_requested") return;
    if (registration === null) early.push(event);
    else if (event.registration === registration) handle(event);
  });
  const registered = await wire.registerHooks({
    ...(caches.name ? { name: caches.name } : {}),
    ...(caches.leaseMs ? { lease_ms: caches.leaseMs } : {}),
  });
  registration = registered.registration;
  const lease = registered.lease_ms;
  const renewing = lease ? setInterval(() => { wire.renewHooks(registered.registration).catch(() => {}); }, Math.max(lease / 3, 10)) : null;
  renewing?.unref?.();
  for (const request of [...registered.pending, ...early]) if (request.registration === registration) handle(request);
  for (const { event } of feed.seen) {
    if ((event.type === "instance.load_requested" || event.type === "instance.dispose_requested") && event.registration === registration) handle(event);
  }
  return {
    registered,
    /** Stop: unregister (outstanding requests fail at once) and wait for the acknowledgements under way. */
    async close() {
      if (renewing) clearInterval(renewing);
      off();
      await Promise.all(running);
      return wire.unregisterHooks(registered.registration);
    },
  };
}
