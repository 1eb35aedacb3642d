// Preloaded (node --import) into the MCP conformance suite's CLI, which has
// no option for request headers (0.2.0-alpha.12: `server --url` only), while
// demesne serve --http wants `Authorization: Bearer TOKEN` on every request.
// It adds that header to whatever the suite sends to the server under test,
// through the three ways the suite sends: global fetch (the SDK's Streamable
// HTTP transport and the stateless checks), undici.request (the Host/Origin
// checks) and node:http (raw POSTs). Requests elsewhere, and requests that
// carry an Authorization of their own, are left alone.
//
//   DEMESNE_CONFORMANCE_URL=http://127.0.0.1:PORT/mcp
//   DEMESNE_CONFORMANCE_TOKEN=...
//   DEMESNE_CONFORMANCE_UNDICI=/abs/path/to/the/suite's/undici (optional)

import http from 'node:http';
import { createRequire } from 'node:module';

const target = new URL(process.env.DEMESNE_CONFORMANCE_URL);
const auth = `Bearer ${process.env.DEMESNE_CONFORMANCE_TOKEN}`;
const LOCAL = new Set(['127.0.0.1', 'localhost', '[::1]']);

function ours(host, port) {
  return LOCAL.has(String(host)) && String(port) === target.port;
}
function oursUrl(u) {
  try {
    const url = new URL(String(u));
    return ours(url.hostname, url.port);
  } catch {
    return false;
  }
}
/** headers (object, [[k, v]...], flat [k, v, ...], Headers or undefined) with Authorization added. */
function withAuth(headers) {
  if (headers === undefined || headers === null) return { authorization: auth };
  if (typeof headers.has === 'function' && typeof headers.set === 'function') {
    const copy = new Headers(headers);
    if (!copy.has('authorization')) copy.set('authorization', auth);
    return copy;
  }
  if (Array.isArray(headers)) {
    const pairs = headers.length && Array.isArray(headers[0]);
    const names = pairs ? headers.map(([k]) => k) : headers.filter((_, i) => i % 2 === 0);
    if (names.some((k) => String(k).toLowerCase() === 'authorization')) return headers;
    return pairs ? [...headers, ['authorization', auth]] : [...headers, 'authorization', auth];
  }
  if (Object.keys(headers).some((k) => k.toLowerCase() === 'authorization')) return headers;
  return { ...headers, authorization: auth };
}

const realFetch = globalThis.fetch;
globalThis.fetch = function fetchWithToken(input, init) {
  const url = input instanceof Request ? input.url : input;
  if (!oursUrl(url)) return realFetch(input, init);
  const base = init?.headers ?? (input instanceof Request ? input.headers : undefined);
  return realFetch(input, { ...init, headers: withAuth(new Headers(base ?? {})) });
};

const realRequest = http.request;
http.request = function requestWithToken(options, ...rest) {
  if (typeof options === 'object' && options !== null && !(options instanceof URL) &&
      ours(options.hostname ?? options.host, options.port)) {
    options = { ...options, headers: withAuth(options.headers) };
  }
  return realRequest.call(this, options, ...rest);
};

// The suite imports undici's request as an ES named export of a CommonJS
// module: its value is read when the suite first imports it, after this
// preload ran, so replacing it in module.exports here is what it gets.
if (process.env.DEMESNE_CONFORMANCE_UNDICI) {
  const undici = createRequire(import.meta.url)(process.env.DEMESNE_CONFORMANCE_UNDICI);
  const realUndiciRequest = undici.request;
  undici.request = function undiciRequestWithToken(url, opts = {}) {
    return oursUrl(url) ? realUndiciRequest.call(this, url, { ...opts, headers: withAuth(opts.headers) })
      : realUndiciRequest.call(this, url, opts);
  };
}
