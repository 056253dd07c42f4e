// node --test integrations/openclaw/feedback.test.mjs: where the commands find the server, and what they send or refuse.
import assert from "node:assert/strict";
import http from "node:http";
import { test } from "node:test";

import { CommandError, bad, good, learning, resolveServer } from "./feedback.js";

const provider = (compat) => ({
  baseUrl: "http://127.0.0.1:7860/v1/",
  apiKey: "sk-provider",
  models: [{ id: "openclaw", ...(compat ? { compat } : {}) }],
});
const config = (compat) => ({ models: { providers: { trl: provider(compat) } } });

test("the server and key come from the provider entry unless the plugin config names them", () => {
  const fromProvider = resolveServer({}, config({ sendSessionAffinityHeaders: true }));
  assert.deepEqual(fromProvider, { root: "http://127.0.0.1:7860", apiKey: "sk-provider", timeoutMs: 15000 });
  const responses = resolveServer(undefined, config({ sendSessionIdHeader: true }));
  assert.equal(responses.root, "http://127.0.0.1:7860");
  const own = resolveServer(
    { baseUrl: "http://h:1", apiKeyEnv: "K", timeoutMs: 2000 },
    config({ sendSessionAffinityHeaders: true }),
    { K: "sk-env" },
  );
  assert.deepEqual(own, { root: "http://h:1", apiKey: "sk-env", timeoutMs: 2000 });
  assert.equal(resolveServer({ baseUrl: "http://h:1" }, {}).apiKey, undefined);
});

test("no server, or a provider that does not send the session id, is refused with what to set", () => {
  assert.throws(() => resolveServer({}, {}), (err) => err instanceof CommandError && /baseUrl/.test(err.message));
  assert.throws(
    () => resolveServer({ provider: "other" }, config({ sendSessionAffinityHeaders: true })),
    /"other", which does not exist/,
  );
  assert.throws(() => resolveServer({}, config()), /sendSessionAffinityHeaders/);
  assert.throws(() => resolveServer({ baseUrl: "http://h:1" }, config()), /sendSessionAffinityHeaders/);
});

test("what the commands send, and what they refuse before sending anything", async () => {
  const seen = [];
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      seen.push({ method: req.method, url: req.url, auth: req.headers.authorization, body });
      res.setHeader("content-type", "application/json");
      if (req.url === "/v1/feedback") {
        const sent = JSON.parse(body);
        if (sent.session_id === "none-yet") {
          res.statusCode = 404;
          res.end(JSON.stringify({ error: { message: "no turn", code: "turn_not_found" } }));
          return;
        }
        res.end(JSON.stringify({ turn_id: 7, attached: true, reason: "", correction_seconds_left: null }));
      } else if (req.url === "/v1/status") {
        res.end(JSON.stringify({ policy_version: 3, samples_waiting: 1, correction_window: { waiting: 0 } }));
      } else {
        res.statusCode = 409;
        res.end(JSON.stringify({ error: { message: "this server does not train", code: "learning_unavailable" } }));
      }
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const target = { root: `http://127.0.0.1:${server.address().port}`, apiKey: "sk-x", timeoutMs: 5000 };
  try {
    assert.match(await good(target, "s-1"), /👍 Noted for the last reply \(turn 7\)/);
    assert.deepEqual(JSON.parse(seen[0].body), { turn_id: "latest", session_id: "s-1", rating: 1 });
    assert.equal(seen[0].auth, "Bearer sk-x");
    assert.match(await bad(target, "s-1", "  Please answer as a bulleted list. "), /👎/);
    assert.equal(JSON.parse(seen[1].body).text, "Please answer as a bulleted list.");
    await assert.rejects(bad(target, "none-yet", ""), /no reply to rate in this conversation yet/);
    const count = seen.length;
    await assert.rejects(bad(target, "s-1", "x".repeat(4001)), /at most 4000/);
    await assert.rejects(good(target, undefined), /no OpenClaw session yet/);
    await assert.rejects(learning(target, "faster"), /takes nothing, pause or resume/);
    assert.equal(seen.length, count); // refused before any call
    assert.match(await learning(target, ""), /Serving version 3; 1 sample waiting.*does not train/);
  } finally {
    server.close();
  }
});
