// The chat commands' work, apart from OpenClaw: where the server is, the calls to its API, the replies.
//
// The conversation is named by OpenClaw's session id (the command handler's ctx.sessionId), which is what the
// server's session is called when the provider sends OpenClaw's session headers
// (compat.sendSessionAffinityHeaders for openai-completions, compat.sendSessionIdHeader for openai-responses):
// the server names that conversation's session by it, so "the latest turn of session <id>" is the last reply the
// person saw in this chat.

export const DEFAULT_PROVIDER = "trl";
export const DEFAULT_TIMEOUT_MS = 15000;
export const MAX_TEXT_CHARS = 4000; // a /bad text longer than this is refused here (the server has its own limit)
const MAX_SHOWN_CHARS = 300;

export class CommandError extends Error {}

function shorten(text, limit = MAX_SHOWN_CHARS) {
  const s = String(text ?? "");
  return s.length > limit ? `${s.slice(0, limit)}…` : s;
}

function providerEntry(config, name) {
  const providers = config?.models?.providers;
  return providers && typeof providers === "object" ? providers[name] : undefined;
}

/** Whether the provider's models send OpenClaw's session id (the only way the server can name this chat). */
export function sendsSessionId(provider) {
  const models = Array.isArray(provider?.models) ? provider.models : [];
  const on = (compat) => compat?.sendSessionAffinityHeaders === true || compat?.sendSessionIdHeader === true;
  return on(provider?.compat) || models.some((m) => on(m?.compat));
}

/**
 * Where the server is and how to reach it: the plugin's own config first, else the provider entry's.
 * Throws CommandError (with what to set) when neither names a server.
 */
export function resolveServer(pluginConfig, config, env = process.env) {
  const own = pluginConfig && typeof pluginConfig === "object" ? pluginConfig : {};
  const providerName = own.provider || DEFAULT_PROVIDER;
  const provider = providerEntry(config, providerName);
  const baseUrl = own.baseUrl || provider?.baseUrl;
  if (!baseUrl || typeof baseUrl !== "string") {
    throw new CommandError(
      `openclaw-trl: no server to talk to: set plugins.entries.openclaw-trl.config.baseUrl, or name the ` +
        `models.providers entry of your openclaw-trl server in its "provider" (now "${providerName}", which ` +
        `${provider ? "has no baseUrl" : "does not exist"}).`,
    );
  }
  let apiKey = own.apiKey;
  if (!apiKey && own.apiKeyEnv) apiKey = env[own.apiKeyEnv];
  if (!apiKey && typeof provider?.apiKey === "string") apiKey = provider.apiKey;
  if (provider && !sendsSessionId(provider)) {
    throw new CommandError(
      `openclaw-trl: the provider "${providerName}" does not send OpenClaw's session id, so the server cannot ` +
        `tell which conversation this is. Add "compat": {"sendSessionAffinityHeaders": true} ` +
        `("sendSessionIdHeader": true for "api": "openai-responses") to its model entry, then start a new ` +
        `conversation (/new).`,
    );
  }
  const root = baseUrl.replace(/\/+$/, "").replace(/\/v1$/, "");
  const timeoutMs = Number.isInteger(own.timeoutMs) ? own.timeoutMs : DEFAULT_TIMEOUT_MS;
  return { root, apiKey: apiKey || undefined, timeoutMs };
}

/** One call to the server's API; returns the parsed JSON, or throws CommandError with the server's message. */
export async function call(server, method, path, body) {
  const headers = { accept: "application/json" };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (server.apiKey) headers.authorization = `Bearer ${server.apiKey}`;
  let response;
  try {
    response = await fetch(`${server.root}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(server.timeoutMs),
    });
  } catch (err) {
    throw new CommandError(`openclaw-trl: the server at ${server.root} did not answer (${shorten(err?.message, 200)}).`);
  }
  const text = await response.text();
  let data;
  try {
    data = text ? JSON.parse(text) : {};
  } catch {
    data = { error: { message: shorten(text) } };
  }
  if (!response.ok) {
    const error = new CommandError(
      `openclaw-trl: ${shorten(data?.error?.message || `the server answered ${response.status}`)}`,
    );
    error.status = response.status;
    error.code = data?.error?.code;
    throw error;
  }
  return data;
}

function feedbackError(err) {
  if (err instanceof CommandError && err.code === "turn_not_found") {
    return new CommandError(
      "openclaw-trl: there is no reply to rate in this conversation yet (or the server did not receive this " +
        "chat's session id: check the provider's compat.sendSessionAffinityHeaders).",
    );
  }
  return err;
}

async function signal(server, sessionId, body) {
  if (!sessionId) {
    throw new CommandError("openclaw-trl: this chat has no OpenClaw session yet: send a message first.");
  }
  try {
    return await call(server, "POST", "/v1/feedback", { turn_id: "latest", session_id: sessionId, ...body });
  } catch (err) {
    throw feedbackError(err);
  }
}

function notLearned(result) {
  return result.attached ? "" : ` It is kept, but will not be learned from: ${shorten(result.reason, 200)}.`;
}

/** /good: a 👍 on the last reply. */
export async function good(server, sessionId) {
  const result = await signal(server, sessionId, { rating: 1 });
  return `👍 Noted for the last reply (turn ${result.turn_id}).${notLearned(result)}`;
}

/** /bad [what you wanted]: a 👎 on the last reply; the text is the correction the next update learns from. */
export async function bad(server, sessionId, args) {
  const text = String(args ?? "").trim();
  if (text.length > MAX_TEXT_CHARS) {
    throw new CommandError(
      `openclaw-trl: the correction is ${text.length} characters; at most ${MAX_TEXT_CHARS} are sent. Say what ` +
        "you wanted in fewer words.",
    );
  }
  const result = await signal(server, sessionId, text ? { rating: -1, text } : { rating: -1 });
  if (text) {
    return `👎 Noted for the last reply (turn ${result.turn_id}), with what you wanted: “${shorten(text, 200)}”.${notLearned(result)}`;
  }
  const left = result.correction_seconds_left;
  const wait = left ? ` Within ${Math.round(left)} s, /bad <what you wanted> adds what the answer should have been.` : "";
  return `👎 Noted for the last reply (turn ${result.turn_id}).${wait}${notLearned(result)}`;
}

/** /undo: the last reply is withdrawn: never judged or trained on (a waiting sample is dropped). */
export async function undo(server, sessionId) {
  const result = await signal(server, sessionId, { action: "withdraw" });
  if (result.already) return `↩️ The last reply (turn ${result.turn_id}) was already withdrawn.`;
  const trained =
    result.trained_step == null ? "" : ` The update of step ${result.trained_step} had already used it; it stays.`;
  return `↩️ Withdrawn: the last reply (turn ${result.turn_id}) and its rating will not be learned from.${trained}`;
}

/** /learning [pause|resume]: which version serves and how many signals wait; pause or resume the updates. */
export async function learning(server, args) {
  const word = String(args ?? "").trim().toLowerCase();
  if (word && word !== "pause" && word !== "resume") {
    throw new CommandError("openclaw-trl: /learning takes nothing, pause or resume.");
  }
  let switched = "";
  if (word) {
    const paused = word === "pause";
    await call(server, "POST", "/v1/learning", { paused });
    switched = paused ? "⏸️ Learning paused (replies and ratings are still collected). " : "▶️ Learning resumed. ";
  }
  const status = await call(server, "GET", "/v1/status");
  let state = "";
  try {
    state = (await call(server, "GET", "/v1/learning")).paused ? " Learning is paused." : " Learning is on.";
  } catch (err) {
    if (!(err instanceof CommandError && err.status === 409)) throw err;
    state = " This server does not train.";
  }
  const waiting = status.samples_waiting ?? 0;
  const corrections = status.correction_window?.waiting ?? 0;
  const held = corrections ? `, ${corrections} 👎 waiting for a correction` : "";
  return (
    `${switched}Serving version ${status.policy_version ?? 0}; ${waiting} sample${waiting === 1 ? "" : "s"} ` +
    `waiting for the next update${held}.${state}`
  );
}
