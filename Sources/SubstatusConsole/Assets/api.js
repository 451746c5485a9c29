// Calls the substatus API over the Connect protocol (JSON, unary) on this origin, with the API key
// the person pasted. The key lives in sessionStorage only: never in a URL, a cookie or the DOM.

const KEY = "substatus.apiKey";

/** An error answered by the API: the gRPC code name (PERMISSION_DENIED) and its message. */
export class ApiError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
  toString() {
    return `${this.code}: ${this.message}`;
  }
}

export function apiKey() {
  return sessionStorage.getItem(KEY);
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
}

/**
 * POSTs `request` as proto3 JSON to /substatus.v1.<service>/<method> and returns the reply's JSON.
 * Throws ApiError with Connect's code in upper case (the gRPC name) on an error reply.
 */
export async function call(service, method, request = {}) {
  let reply;
  try {
    reply = await fetch(`/substatus.v1.${service}/${method}`, {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        "Authorization": `Bearer ${apiKey() ?? ""}`,
      },
      body: JSON.stringify(request),
      credentials: "omit",
      cache: "no-store",
      referrerPolicy: "no-referrer",
    });
  } catch (error) {
    throw new ApiError("UNAVAILABLE", `the server did not answer (${error.message})`);
  }
  const text = await reply.text();
  let body = {};
  try {
    body = text ? JSON.parse(text) : {};
  } catch {
    throw new ApiError("UNKNOWN", `HTTP ${reply.status}: not JSON`);
  }
  if (!reply.ok) {
    throw new ApiError((body.code ?? "unknown").toUpperCase(), body.message ?? `HTTP ${reply.status}`);
  }
  return body;
}

/** Every page of a paged list call (AIP-158), concatenating `field`. */
export async function callAll(service, method, request, field) {
  const items = [];
  let pageToken = "";
  do {
    const reply = await call(service, method, { ...request, pageSize: 1000, pageToken });
    items.push(...(reply[field] ?? []));
    pageToken = reply.nextPageToken ?? "";
  } while (pageToken);
  return items;
}

/** An int64 of proto3 JSON (a string, or absent for 0) as a Number (milliseconds fit exactly). */
export function int64(value) {
  return value === undefined || value === null || value === "" ? 0 : Number(value);
}
