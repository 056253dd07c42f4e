"""The Gradio chat app: talk to the model, rate and correct its answers, watch it learn.

Every conversation is one session (a fresh id per "New conversation"). Each message you send is the
next state of the previous answer; 👍/👎 and a correction are explicit next states too, so the last
answer of a conversation is not lost. The UI calls the server's ``ChatService``
in-process: the same template, engine, collector and store as the OpenAI API.

``build_ui`` = the layout (``_layout``: the chat column, the learning panel) + the event handlers
(``UiHandlers``, one method per event) + the wiring between them (``_wire``). This module imports gradio;
``openclaw_trl.serving.app`` imports it only when it mounts the UI. No ``from __future__ import annotations``
here: Gradio reads the ``gr.LikeData`` annotation at runtime to inject the event data.
"""

import asyncio
import html
import uuid
from dataclasses import dataclass
from typing import Any

import gradio as gr

from openclaw_trl.serving.chat_service import ChatService
from openclaw_trl.serving.openai_schema import ApiError
from openclaw_trl.serving.ui_versions import VersionControls

REASONING_TITLE = "💭 Reasoning"
STATUS_EVERY_S = 2.0
# the trainer logs dozens of metrics (TRL names); the panel shows these when present
PANEL_METRICS = (
    "step",
    "loss",
    "reward",
    "opd/hint_accept_rate",
    "grad_norm",
    "samples/staleness",
    "step_time",
)


def new_conversation() -> dict:
    """Per-browser-tab state: the API messages, and which displayed message belongs to which turn."""
    return {
        "session_id": f"ui-{uuid.uuid4().hex[:16]}",
        "messages": [],  # the conversation as the API sees it (reasoning + tool calls kept)
        "turn_of": {},  # displayed message index (str, JSON state) -> turn id
        "ratings": {},  # turn id (str) -> ±1
        "target": None,  # turn id the next correction applies to (last rated, else last answer)
        "last_turn": None,
        "started": False,
    }


def _display_assistant(message: dict) -> list[dict]:
    """One assistant turn -> chatbot messages: a collapsible reasoning block, then the answer."""
    out = []
    if message.get("reasoning_content"):
        out.append(
            {
                "role": "assistant",
                "content": message["reasoning_content"],
                "metadata": {"title": REASONING_TITLE, "status": "done"},
            }
        )
    text = message.get("content") or ""
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        text += f"\n\n🔧 `{fn.get('name')}({fn.get('arguments', '')})`"
    out.append({"role": "assistant", "content": text.strip() or "…"})
    return out


def _metric(name: str, value) -> str:
    return (
        f"{name} = {value:.4g}"
        if isinstance(value, int | float) and not isinstance(value, bool)
        else f"{name} = {value}"
    )


def _status_views(status: dict):
    """The learning panel: a summary line, the last hints, and the per-update curves."""
    import pandas as pd

    version = status.get("policy_version", 0)
    waiting, batch = status.get("samples_waiting"), status.get("batch_size")
    lines = [f"**Policy version:** v{version}"]
    if waiting is not None:
        lines.append(f"**Samples waiting:** {waiting}" + (f" / {batch} per update" if batch else ""))
    failed, teacherless = status.get("turns_failed"), status.get("teacher_failed")
    if failed or teacherless:
        lines.append(
            f"**Not learned from:** {failed or 0} turns failed judging, {teacherless or 0} lost their teacher"
        )
    metrics = status.get("last_metrics") or {}
    if metrics:
        keys = [k for k in PANEL_METRICS if k in metrics] or list(metrics)[:8]
        shown = ", ".join(_metric(k, metrics[k]) for k in keys)
        lines.append(f"**Last update:** {shown}")
    hints = status.get("last_hints") or []
    hints_md = (
        "\n".join(f"- {html.escape(str(h))[:300]}" for h in hints[-5:])
        if hints
        else "_No hints extracted yet: correct an answer or keep chatting._"
    )
    history = status.get("history") or []
    frame = pd.DataFrame(
        [
            {
                "step": h.get("step", i + 1),
                "reward_mean": h.get("reward_mean"),
                "hint_accept_rate": h.get("hint_accept_rate"),
            }
            for i, h in enumerate(history)
        ],
        columns=["step", "reward_mean", "hint_accept_rate"],
    )
    # Logged metrics can arrive as strings, and an empty frame has object columns: either would be plotted as
    # categories (an unordered axis), so the curves are floats from the first, empty, view on.
    frame = frame.apply(pd.to_numeric, errors="coerce").astype("float64")
    return "  \n".join(lines), hints_md, frame, frame


class UiHandlers:
    """The UI's events, each a method on the shared ``ChatService`` (the conversation is Gradio state)."""

    def __init__(self, service: ChatService):
        self.service = service
        self.model = service.settings.model_names[0]

    async def respond(self, text: str, history: list, conv: dict, private: bool):
        """Send a message; the answer streams into the chat, then the conversation records its turn."""
        text = (text or "").strip()
        messages = conv["messages"] + [{"role": "user", "content": text}]
        prep = await self._prepare(messages, conv, private) if text else None
        if prep is None:
            yield gr.skip(), history, conv, gr.skip()
            return
        history = history + [{"role": "user", "content": text}]
        partial: dict[str, Any] = {"role": "assistant", "content": "", "reasoning_content": ""}
        yield "", history + _display_assistant(partial), conv, gr.skip()
        try:
            async with self.service.stream(prep) as turn:
                async for delta in turn:
                    for key in ("content", "reasoning_content"):
                        if delta.get(key):
                            partial[key] += delta[key]
                    yield gr.skip(), history + _display_assistant(partial), conv, gr.skip()
        except Exception as exc:  # the turn was not stored (the stream aborted it): say so, keep the chat
            gr.Warning(f"Generation failed: {exc}")
            yield text, history[:-1], conv, f"Generation failed: {exc}"  # the message goes back in the box
            return
        yield gr.skip(), *self._recorded(history, conv, messages, turn.result)

    async def _prepare(self, messages: list[dict], conv: dict, private: bool):
        """The turn of ``messages`` in this conversation's session, or ``None`` (with a warning) when refused."""
        headers = {
            "x-session-id": conv["session_id"],
            "x-turn-type": "main",
            "x-session-private": "true" if private else "false",
        }
        payload = {"model": self.model, "messages": messages}
        try:
            return await asyncio.to_thread(self.service.prepare, payload, headers)
        except ApiError as err:
            gr.Warning(err.message)
            return None

    @staticmethod
    def _recorded(history: list, conv: dict, messages: list[dict], result) -> tuple[list, dict, str]:
        """The chat, the conversation state and the notice once the answer is stored as a turn."""
        shown = _display_assistant(result.message)
        base = len(history)
        conv = dict(
            conv, messages=messages + [result.message], started=True, last_turn=result.turn_id, target=None
        )
        conv["turn_of"] = dict(conv["turn_of"], **{str(base + i): result.turn_id for i in range(len(shown))})
        note = f"Answer recorded as turn {result.turn_id} (policy v{result.policy_version})."
        return history + shown, conv, note

    def on_like(self, conv: dict, data: gr.LikeData):
        """👍/👎 on an answer: the explicit next state of its turn."""
        index = data.index[0] if isinstance(data.index, list | tuple) else data.index
        turn = conv["turn_of"].get(str(index))
        if turn is None:
            return conv, "That message has no recorded turn."
        liked = data.liked if isinstance(data.liked, bool) else str(data.liked).lower() in ("like", "true")
        rating = 1 if liked else -1
        try:
            self.service.feedback(turn, rating, None)
        except ApiError as err:
            return conv, f"Feedback not recorded: {err.message}"
        conv = dict(conv, target=turn, ratings=dict(conv["ratings"], **{str(turn): rating}))
        if rating > 0:
            return conv, f"👍 recorded for turn {turn}."
        return (
            conv,
            f"👎 recorded for turn {turn}. Write what the answer should have been below to teach the model.",
        )

    def on_correct(self, text: str, conv: dict):
        """A correction of the answer rated last (else the latest answer), with that answer's rating."""
        text = (text or "").strip()
        turn = conv.get("target") or conv.get("last_turn")
        if not text:
            return gr.skip(), conv, "Write a correction first."
        if turn is None:
            return gr.skip(), conv, "There is no answer to correct yet."
        rating = conv["ratings"].get(str(turn), -1)
        try:
            self.service.feedback(turn, rating, text)
        except ApiError as err:
            return gr.skip(), conv, f"Correction not recorded: {err.message}"
        return "", conv, f"✍️ Correction recorded for turn {turn}: the model will learn from it."

    def on_new(self, conv: dict):
        """End the session (its last answer keeps only explicit feedback) and start a fresh one.

        The "don't learn" switch is per conversation, so it resets too.
        """
        try:
            self.service.end_session(conv["session_id"])
        except Exception as exc:  # ending is bookkeeping; a new conversation must still start
            gr.Warning(f"could not close the previous session: {exc}")
        return [], new_conversation(), False, "New conversation."

    def on_private(self, private: bool, conv: dict):
        self.service.set_private(conv["session_id"], bool(private))
        return (
            "🔒 This conversation will not be learned from."
            if private
            else "This conversation is learned from."
        )

    def refresh(self):
        """The learning panel's views, refreshed every ``STATUS_EVERY_S``."""
        try:
            return _status_views(self.service.status())
        except Exception as exc:  # a status hiccup must not spam error toasts every tick
            return _status_views({"policy_version": "?", "last_metrics": {"status error": str(exc)}})


@dataclass
class _Components:
    """The components the events read and write."""

    conv: Any
    chatbot: Any
    box: Any
    send: Any
    new: Any
    private: Any
    correction: Any
    correct: Any
    notice: Any
    panel: list  # summary, hints, reward plot, hint-rate plot: what ``_status_views`` returns, in order


def _chat_column() -> dict:
    """The chat, the message box, the conversation controls and the correction box."""
    c = {
        "chatbot": gr.Chatbot(
            label="Chat", height=460, elem_id="chat", feedback_options=("Like", "Dislike"), autoscroll=True
        )
    }
    with gr.Row():
        c["box"] = gr.Textbox(
            placeholder="Message the model…", show_label=False, scale=5, elem_id="msg", autofocus=True
        )
        c["send"] = gr.Button("Send", variant="primary", scale=1, elem_id="send")
    with gr.Row():
        c["new"] = gr.Button("New conversation", elem_id="new-conversation")
        c["private"] = gr.Checkbox(label="Don't learn from this conversation", value=False, elem_id="private")
    with gr.Row():
        c["correction"] = gr.Textbox(
            placeholder="Correct this answer: what should it have said?",
            show_label=False,
            scale=5,
            elem_id="correction",
        )
        c["correct"] = gr.Button("Send correction", scale=1, elem_id="send-correction")
    c["notice"] = gr.Markdown("", elem_id="notice")
    return c


def _learning_panel() -> list:
    """The status panel: the summary, the last hints and the per-update curves."""
    gr.Markdown("### Learning")
    summary = gr.Markdown("", elem_id="learning-status")
    gr.Markdown("**Last hints extracted**")
    hints = gr.Markdown("", elem_id="hints")
    reward_plot = gr.LinePlot(x="step", y="reward_mean", title="Reward per update", height=200, y_lim=[-1, 1])
    hint_plot = gr.LinePlot(
        x="step", y="hint_accept_rate", title="Accepted-hint rate per update", height=200, y_lim=[0, 1]
    )
    return [summary, hints, reward_plot, hint_plot]


def _layout(title: str, versions: VersionControls | None = None) -> _Components:
    """The page: a title, the chat column on the left, the learning panel (and ``versions``) on the right."""
    conv = gr.State(new_conversation())
    gr.Markdown(
        f"## {html.escape(title)}\nTalk to the model: every reply, rating and correction teaches it. A correction applies to the answer you rated last, else to the latest answer."
    )
    with gr.Row():
        with gr.Column(scale=3):
            chat = _chat_column()
        with gr.Column(scale=2):
            panel = _learning_panel()
            if versions is not None:
                versions.build()
    return _Components(conv=conv, panel=panel, **chat)


def _wire(demo, c: _Components, on: UiHandlers) -> None:
    """Connect each component's events to its handler; the panel refreshes on load and on a timer."""
    chat_io = dict(inputs=[c.box, c.chatbot, c.conv, c.private], outputs=[c.box, c.chatbot, c.conv, c.notice])
    c.box.submit(on.respond, **chat_io)
    c.send.click(on.respond, **chat_io)
    c.chatbot.like(on.on_like, inputs=[c.conv], outputs=[c.conv, c.notice])
    correct_io = dict(inputs=[c.correction, c.conv], outputs=[c.correction, c.conv, c.notice])
    c.correct.click(on.on_correct, **correct_io)
    c.correction.submit(on.on_correct, **correct_io)
    c.new.click(on.on_new, inputs=[c.conv], outputs=[c.chatbot, c.conv, c.private, c.notice])
    c.private.input(on.on_private, inputs=[c.private, c.conv], outputs=[c.notice])
    gr.Timer(STATUS_EVERY_S).tick(on.refresh, outputs=c.panel, show_progress="hidden", queue=False)
    demo.load(on.refresh, outputs=c.panel)


def build_ui(service: ChatService, title: str = "openclaw-trl", learning=None):
    """The ``gr.Blocks`` app (mounted at ``/`` by ``openclaw_trl.serving.app.create_app``); ``learning`` (a
    ``LearningControl``) backs the panel's version controls (``serving.ui_versions``)."""
    handlers = UiHandlers(service)
    versions = VersionControls(service, learning)
    with gr.Blocks(title=title) as demo:
        _wire(demo, _layout(title, versions), handlers)
        versions.wire(demo)
    demo.queue(default_concurrency_limit=16)
    return demo
