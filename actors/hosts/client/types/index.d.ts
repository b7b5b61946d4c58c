export { StdioClient } from "./stdio.js";
export { keepCaches } from "./caches.js";
export { Client, WireError, retriable } from "./http.js";
export { EventFeed, WaitTimeout, eventOf, parseEventId, readStream, sseBlocks } from "./events.js";
export { ExternalRun, RunInterrupted } from "./external.js";
export { Served, serve } from "./spawn.js";
