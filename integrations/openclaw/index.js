// openclaw-trl feedback: chat commands that rate the last reply of this conversation on an openclaw-trl server.
// They are answered by the plugin, never by the model: /good, /bad [what you wanted], /undo, /learning [pause|resume].
import { CommandError, bad, good, learning, resolveServer, undo } from "./feedback.js";

function handler(run) {
  return async (ctx) => {
    try {
      const server = resolveServer(ctx.pluginConfig ?? pluginConfigOf(ctx), ctx.config);
      return { text: await run(server, ctx) };
    } catch (err) {
      if (err instanceof CommandError) return { text: err.message, isError: true };
      return { text: `openclaw-trl: ${String(err?.message ?? err).slice(0, 300)}`, isError: true };
    }
  };
}

let registeredConfig = {};

function pluginConfigOf(ctx) {
  const entry = ctx.config?.plugins?.entries?.["openclaw-trl"];
  return entry?.config ?? registeredConfig;
}

export default {
  id: "openclaw-trl",
  name: "openclaw-trl feedback",
  description: "Rate the last reply from inside the chat for an openclaw-trl server",
  register(api) {
    registeredConfig = api.pluginConfig ?? {};
    api.registerCommand({
      name: "good",
      description: "openclaw-trl: the last reply was good (👍)",
      acceptsArgs: false,
      handler: handler((server, ctx) => good(server, ctx.sessionId)),
    });
    api.registerCommand({
      name: "bad",
      description: "openclaw-trl: the last reply was bad (👎); add what you wanted, it becomes the correction",
      acceptsArgs: true,
      handler: handler((server, ctx) => bad(server, ctx.sessionId, ctx.args)),
    });
    api.registerCommand({
      name: "undo",
      description: "openclaw-trl: withdraw the last reply and its rating (never learned from)",
      acceptsArgs: false,
      handler: handler((server, ctx) => undo(server, ctx.sessionId)),
    });
    api.registerCommand({
      name: "learning",
      description: "openclaw-trl: the version serving and the signals waiting; /learning pause | resume",
      acceptsArgs: true,
      handler: handler((server, ctx) => learning(server, ctx.args)),
    });
  },
};
