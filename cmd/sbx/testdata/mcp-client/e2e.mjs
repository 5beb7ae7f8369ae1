// Drives sbx's MCP tools with the official TypeScript SDK client, the way
// a third-party agent host would. Run by cmd/sbx/mcp_e2e_test.go:
//
//   node e2e.mjs http|stdio
//
// Environment: SBX_API (the API base URL), SBX_TOKEN (an account agent
// token), SBX_LIMITED_TOKEN (a token of an account whose concurrency limit
// is 0), SBX_BIN (the sbx binary, for stdio), PREVIEW_PORT_IN_SANDBOX (a
// free port for the dev server inside the sandbox), LONG_SECONDS (how long
// the long command runs), EXEC_BOUND (stdio: sbx mcp's --exec-bound).
//
// It prints one JSON line with what it saw; the Go test checks it and the
// ledger. Any failed expectation exits non-zero with the reason.
import http from "node:http";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const mode = process.argv[2];
const api = process.env.SBX_API;
const token = process.env.SBX_TOKEN;

function fail(msg) {
  console.error(`mcp e2e (${mode}): ${msg}`);
  process.exit(1);
}

async function connect(tok) {
  const client = new Client({ name: "sbx-e2e", version: "1.0.0" });
  let transport;
  if (mode === "http") {
    transport = new StreamableHTTPClientTransport(new URL(api + "/mcp"), {
      requestInit: { headers: { Authorization: `Bearer ${tok}` } },
    });
  } else if (mode === "stdio") {
    transport = new StdioClientTransport({
      command: process.env.SBX_BIN,
      args: ["mcp", "--exec-bound", process.env.EXEC_BOUND ?? "45s"],
      env: { PATH: process.env.PATH, HOME: process.env.HOME, SBX_API: api, SBX_TOKEN: tok },
      stderr: "inherit",
    });
  } else {
    fail(`unknown mode ${mode}`);
  }
  await client.connect(transport);
  return client;
}

// call returns [structuredContent, isError].
async function call(client, name, args, options) {
  const res = await client.callTool({ name, arguments: args }, undefined, { timeout: 120000, ...options });
  return [res.structuredContent ?? {}, res.isError === true];
}

async function ok(client, name, args, options) {
  const [out, isError] = await call(client, name, args, options);
  if (isError) fail(`${name}: tool error ${JSON.stringify(out)}`);
  return out;
}

// get fetches a preview URL through the preview proxy on loopback (the
// *.preview.localhost name is sent as Host; it need not resolve here).
function get(url, tok) {
  const u = new URL(url);
  return new Promise((resolve) => {
    const req = http.request(
      { host: "127.0.0.1", port: u.port, path: "/", headers: { Host: u.host, Authorization: `Bearer ${tok}` } },
      (res) => {
        let body = "";
        res.on("data", (d) => (body += d));
        res.on("end", () => resolve({ status: res.statusCode, body }));
      },
    );
    req.on("error", (err) => resolve({ status: 0, body: String(err) }));
    req.end();
  });
}

const seen = { mode };
const client = await connect(token);
const listed = (await client.listTools()).tools;
seen.tools = listed.map((t) => t.name).sort();
// Tools declaring an output schema: callTool validates every result's
// structuredContent against it (errors included), so each call below
// checks its tool's schema too.
seen.with_output_schema = listed.filter((t) => t.outputSchema?.type === "object").map((t) => t.name).sort();

// The result is structured and still readable as text: the same sandbox.
const created = await client.callTool({ name: "create_sandbox", arguments: { profile: "tuist-linux-small" } });
const sb = created.structuredContent ?? {};
const text = created.content?.find((c) => c.type === "text")?.text;
if (created.isError || !sb.id || sb.status !== "pending" || JSON.parse(text ?? "{}").id !== sb.id) {
  fail(`create_sandbox: structured ${JSON.stringify(sb)}, text ${text}`);
}
seen.sandbox_id = sb.id;
seen.created_structured = { id: sb.id, status: sb.status, profile: sb.profile };
const ready = await ok(client, "wait_sandbox_ready", { sandbox_id: sb.id });
if (ready.status !== "ready") fail(`wait_sandbox_ready: ${JSON.stringify(ready)}`);

await ok(client, "write_sandbox_file", { sandbox_id: sb.id, path: "notes/hello.txt", content: "hello from the agent\n" });

// The command prints the file, then waits for a file named "go" that this
// client writes only after the first progress notification arrived: the
// output is seen while the command still runs.
const progress = [];
let released = false;
const exec = await ok(
  client,
  "exec_in_sandbox",
  { sandbox_id: sb.id, command: "cat notes/hello.txt; while [ ! -e go ]; do sleep 0.05; done; echo finished" },
  {
    onprogress: (p) => {
      progress.push(p.message);
      if (!released) {
        released = true;
        // A concurrent call on the same client: the exec is still open.
        call(client, "write_sandbox_file", { sandbox_id: sb.id, path: "go", content: "" }).catch((e) => fail(`release: ${e}`));
      }
    },
  },
);
// Under a short bound (stdio's) a loaded machine may answer before the
// end: follow the handle.
for (let st = exec; st.running; ) {
  st = await ok(client, "wait_exec", { exec_id: st.exec_id, stdout_offset: st.stdout_next_offset, stderr_offset: st.stderr_next_offset });
  exec.stdout += st.stdout;
  exec.exit_code = st.exit_code;
  exec.running = st.running;
}
if (exec.exit_code !== 0 || exec.stdout !== "hello from the agent\nfinished\n") fail(`exec result ${JSON.stringify(exec)}`);
if (progress.length === 0 || progress[0] !== "hello from the agent\n") fail(`progress ${JSON.stringify(progress)}`);
seen.first_progress = progress[0];
seen.exec_stdout = exec.stdout;

// A command longer than the client's default 60 s request timeout, run
// with the client's DEFAULT request options (no timeout, no
// resetTimeoutOnProgress) through the flow the tool descriptions give:
// exec_in_sandbox answers within the bound with an exec_id while it runs,
// then wait_exec from the offsets seen until running is false.
{
  const secs = Number(process.env.LONG_SECONDS);
  const began = Date.now();
  const answers = [];
  let res = await client.callTool({
    name: "exec_in_sandbox",
    arguments: { sandbox_id: sb.id, command: `for i in $(seq 1 ${secs}); do echo tick $i; sleep 1; done; echo long done`, timeout_seconds: secs + 60 },
  });
  for (;;) {
    const st = res.structuredContent ?? {};
    if (res.isError) fail(`long command: ${JSON.stringify(st)}`);
    answers.push({ after_s: (Date.now() - began) / 1000, running: st.running, stdout: st.stdout, exit_code: st.exit_code });
    if (!st.running) break;
    if (!st.exec_id || answers.length > 100) fail(`long command: ${JSON.stringify(answers)}`);
    res = await client.callTool({
      name: "wait_exec",
      arguments: { exec_id: st.exec_id, stdout_offset: st.stdout_next_offset, stderr_offset: st.stderr_next_offset },
    });
  }
  seen.long = {
    seconds: (Date.now() - began) / 1000,
    calls: answers.length,
    longest_call_s: Math.max(...answers.map((a, i) => a.after_s - (i ? answers[i - 1].after_s : 0))),
    stdout: answers.map((a) => a.stdout).join(""),
    exit_code: answers.at(-1).exit_code,
  };
}

// A dev server bound to loopback inside the sandbox, exposed and fetched
// through the preview proxy.
const port = Number(process.env.PREVIEW_PORT_IN_SANDBOX);
const started = await ok(client, "exec_in_sandbox", {
  sandbox_id: sb.id,
  command: `mkdir -p site && echo 'served to the agent' > site/index.html && { setsid nohup python3 -m http.server --bind 127.0.0.1 --directory site ${port} >/dev/null 2>&1 & }`,
});
if (started.exit_code !== 0) fail(`start dev server: ${JSON.stringify(started)}`);
const exposed = await ok(client, "expose_sandbox_port", { sandbox_id: sb.id, port });
seen.preview_url = exposed.url;
let page = { status: 0 };
for (let i = 0; i < 100 && page.status !== 200; i++) {
  page = await get(exposed.url, token);
  if (page.status !== 200) await new Promise((r) => setTimeout(r, 200));
}
if (page.status !== 200 || !page.body.includes("served to the agent")) fail(`preview fetch: ${JSON.stringify(page)}`);
seen.preview_body = page.body.trim();

// Refusals: over the account's concurrency limit, and a bad token.
const limited = await connect(process.env.SBX_LIMITED_TOKEN);
const [quota, quotaErr] = await call(limited, "create_sandbox", { profile: "tuist-linux-small" });
if (!quotaErr) fail(`create over the limit succeeded: ${JSON.stringify(quota)}`);
seen.quota = quota;
await limited.close();
// Over HTTP the endpoint refuses a bad token at initialize, with 401 and
// the problem document (MCP's authorization rules); sbx mcp over stdio
// has no HTTP to answer with, and refuses it at the first tool call.
if (mode === "http") {
  let refused;
  try {
    const bad = await connect("sbx_at_" + "0".repeat(43));
    await bad.close();
  } catch (e) {
    refused = e;
  }
  if (!refused) fail("bad token: initialize succeeded");
  // The SDK's StreamableHTTPError: the status as code, the body in the message.
  const m = String(refused.message).match(/(\{.*\})/s);
  if (refused.code !== 401 || !m) fail(`bad token: want an HTTP 401 with a problem document, got ${refused.code}: ${refused.message}`);
  seen.bad_token = JSON.parse(m[1]);
} else {
  const bad = await connect("sbx_at_" + "0".repeat(43));
  const [badTok, badErr] = await call(bad, "list_sandboxes", {});
  if (!badErr) fail(`bad token listed sandboxes: ${JSON.stringify(badTok)}`);
  seen.bad_token = badTok;
  await bad.close();
}

const gone = await ok(client, "destroy_sandbox", { sandbox_id: sb.id });
seen.destroyed_status = gone.status;
await client.close();
console.log(JSON.stringify(seen));
