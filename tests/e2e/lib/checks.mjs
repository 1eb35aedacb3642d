// The tool checks every SDK client script runs against one live session.
// Each call of toolChecks() reports exactly TOOL_CHECKS TAP tests.

import { equal, fail, firstText, ok, within } from './harness.mjs';

export const TOOL_CHECKS = 8;

/** Per-call budget handed to the SDK (its own default is 60 s) and to within(). */
export const CALL_TIMEOUT_MS = Number(process.env.E2E_CALL_TIMEOUT_SECONDS ?? 100) * 1000;

/**
 * @param {string} label  prefix for the test names, e.g. "2.x modern"
 * @param {{
 *   listTools: () => Promise<{tools: any[]}>,
 *   callTool: (params: {name: string, arguments: object}) => Promise<any>,
 * }} api
 */
export async function toolChecks(label, api) {
  // 1-2: tools/list
  let tool;
  try {
    const listed = await within(CALL_TIMEOUT_MS, 'tools/list', api.listTools());
    const names = (listed?.tools ?? []).map((t) => t?.name);
    tool = listed?.tools?.find((t) => t?.name === 'sandbox_script');
    ok(tool, `${label}: tools/list includes sandbox_script`, `tools listed: ${JSON.stringify(names)}`);
  } catch (err) {
    fail(`${label}: tools/list includes sandbox_script`, err);
  }
  const schema = tool?.inputSchema;
  ok(
    schema && schema.type === 'object' && schema.additionalProperties === false &&
      Array.isArray(schema.required) && schema.required.includes('command'),
    `${label}: sandbox_script inputSchema is an object with additionalProperties false and required [command]`,
    `inputSchema: ${JSON.stringify(schema)}`,
  );

  // 3-6: a successful run with a non-zero exit code
  let result;
  try {
    result = await within(CALL_TIMEOUT_MS, 'tools/call sandbox_script', api.callTool({
      name: 'sandbox_script',
      arguments: { command: 'echo hi; exit 3', egress: 'none' },
    }));
  } catch (err) {
    fail(`${label}: sandbox_script "echo hi; exit 3" returns a result`, err);
  }
  if (result !== undefined) {
    ok(!result.isError && result.structuredContent && typeof result.structuredContent === 'object',
      `${label}: sandbox_script "echo hi; exit 3" returns structuredContent and isError falsy`,
      `result: ${JSON.stringify(result)}`);
  }
  const sc = result?.structuredContent ?? {};
  equal(sc.exit_code, 3, `${label}: structuredContent.exit_code === 3`);
  equal(sc.stdout, 'hi\n', `${label}: structuredContent.stdout === "hi\\n"`);
  ok(firstText(result).length > 0, `${label}: the result also carries a text content block`,
    `content: ${JSON.stringify(result?.content)}`);

  // 7: a bad argument is a tool result with isError, not a protocol error
  try {
    const bad = await within(CALL_TIMEOUT_MS, 'tools/call with a bad argument', api.callTool({
      name: 'sandbox_script',
      arguments: { command: 'echo hi', timeout_seconds: 'x' },
    }));
    const msg = firstText(bad);
    ok(bad?.isError === true && msg.trim().length > 0,
      `${label}: timeout_seconds "x" gives isError true with a message`,
      `result: ${JSON.stringify(bad)}`);
  } catch (err) {
    fail(`${label}: timeout_seconds "x" gives isError true with a message (got a thrown error instead)`, err);
  }

  // 8: an unknown tool is a JSON-RPC error (-32602 per the MCP spec)
  try {
    const r = await within(CALL_TIMEOUT_MS, 'tools/call of an unknown tool', api.callTool({
      name: 'no_such_tool',
      arguments: {},
    }));
    fail(`${label}: an unknown tool is a JSON-RPC error -32602`, `resolved instead: ${JSON.stringify(r)}`);
  } catch (err) {
    equal(err?.code, -32602, `${label}: an unknown tool is a JSON-RPC error -32602`);
  }
}

/**
 * A shell script for sandbox_exec inside a sandbox made with nested: true:
 * it calls the nested endpoint ($DEMESNE_MCP_URL, $DEMESNE_MCP_TOKEN) with
 * the JSON-RPC request on its stdin (initialize, initialized, the request)
 * and prints the answer's JSON: the last SSE data line, or else the whole
 * body. An initialize that gives no session is tried again (5 times) and
 * said on stderr, which the tests print as a diagnostic: the rootless TSan
 * run once saw a first call into a new nested sandbox print nothing.
 */
export const NESTED_CALL = `set -e
u=$DEMESNE_MCP_URL
h() { curl -sS -H "Content-Type: application/json" -H "Accept: application/json, text/event-stream" -H "Authorization: Bearer $DEMESNE_MCP_TOKEN" "$@"; }
for try in 1 2 3 4 5; do
  h -D /tmp/hd -o /tmp/init "$u" -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"nested","version":"1"}}}' || true
  sid=$(grep -i '^mcp-session-id:' /tmp/hd | tr -d '\\r' | cut -d' ' -f2)
  [ -z "$sid" ] || break
  echo "nested: initialize gave no session (try $try): $(cat /tmp/hd /tmp/init | tr -d '\\r' | tr '\\n' ' ' | head -c 400)" >&2
  sleep 0.3
done
h -o /dev/null -H "Mcp-Session-Id: $sid" "$u" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
h -H "Mcp-Session-Id: $sid" "$u" -d @- >/tmp/answer
if grep -q '^data: ' /tmp/answer; then sed -n 's/^data: //p' /tmp/answer | tail -n 1; else cat /tmp/answer; fi`;

/** Polls cond every stepMs until it gives a truthy value (returned); past ms, throws "<what>: not within ms". */
export async function until(ms, what, cond, stepMs = 100) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}
