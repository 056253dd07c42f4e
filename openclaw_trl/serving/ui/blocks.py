"""The Gradio chat app: talk to the model, rate and correct its answers, watch it learn.

Every conversation is one session (a fresh id per "New conversation"). Each message you send is the
next state of the previous answer. The chatbot's own events are per-message signals on the turn that
message belongs to (the server-side rules are in ``openclaw_trl.sessions.signals``):

* 👍/👎 on any answer: that turn's explicit next state; after a 👎 the correction box is offered right
  there (a line saying a correction replaces the 👎, quoting the server's ``correction_window_s`` when its
  session config has one, and the box focused);
* a clicked example prompt (shown while the chat is empty): sent as if typed;
* editing an answer (the pencil): a correction of that turn, the edited text being what it should have
  said (as the correction box does); the conversation goes on from the model's own answer;
* retry (the last answer): that turn is rejected (a 👎 without text) and a new answer is sampled in its
  place, a new turn;
* undo (the last exchange): the turn is withdrawn, never judged or trained, and your message goes back
  into the box.

Under each answer a muted line names the policy version that wrote it (display only: never part of the
conversation or the stored turn). The UI calls the server's ``ChatService`` in-process for its turns and the
collector for its per-turn signals: the same template, engine, collector and store as the OpenAI API. On a
server with several users the page is behind a login (name + API key) and every handler acts for the
logged-in user's own service, collector, learning control and panel (``ui.tenants``).

The page's words (title, header, examples, what each control teaches) come from ``ui.guide`` (the offline
toy model gets its own), the learning panel's from ``ui.panel``.

``build_ui`` = the layout (``ui.layout``: the chat column, the learning panel) + the event handlers
(``UiHandlers``, one method per event) + the wiring between them (``_wire``). This module imports gradio;
``openclaw_trl.serving.app`` imports it only when it mounts the UI. No ``from __future__ import annotations``
here: Gradio reads the ``gr.LikeData`` annotation at runtime to inject the event data.
"""

import asyncio
import html
from collections.abc import Mapping
from typing import Any

import gradio as gr

from openclaw_trl.serving.errors import ApiError
from openclaw_trl.serving.http.auth import Tenant
from openclaw_trl.serving.pipeline.chat_service import ChatService
from openclaw_trl.serving.protocols.chat_completions.convert import turn_request
from openclaw_trl.serving.protocols.feedback.schema import check_feedback_text, signal_errors
from openclaw_trl.serving.ui.charts import hint_chart, reward_chart
from openclaw_trl.serving.ui.chat import (
    FOCUS_CORRECTION_JS,
    display_assistant,
    event_index,
    feedback_values,
    last_exchange_turn,
    message_text,
    new_conversation,
    part_index,
    previous_exchange,
    shown,
    version_line,
    with_content,
    without_after,
)
from openclaw_trl.serving.ui.guide import Guide, correction_prompt, guide_for
from openclaw_trl.serving.ui.layout import Components, layout
from openclaw_trl.serving.ui.panel import has_points
from openclaw_trl.serving.ui.tenants import TenantLookup, TenantViews, signed_in_line
from openclaw_trl.serving.ui.tenants import correction_window_s as correction_window_s  # re-exported
from openclaw_trl.serving.ui.versions import VersionControls

STATUS_EVERY_S = 2.0


def _chat(history: list, conv: dict):
    """The chat with each answer's 👍/👎 as recorded: Gradio clears the thumbs whenever its value changes."""
    return gr.Chatbot(value=history, feedback_value=feedback_values(conv))


class UiHandlers:
    """The UI's events, each a method: turns on the user's ``ChatService``, per-turn signals and the session
    switches on their collector (``sessions``); the conversation is Gradio state.

    ``UiHandlers(service, sessions, guide, learning)``: the UI of a server with one user.
    ``UiHandlers.per_request(lookup, guide)``: each event acts for the user ``lookup(request)`` returns
    (``ui.tenants``): every handler declares the ``gr.Request`` Gradio passes it (None when called
    directly, which only the one-user lookup accepts)."""

    def __init__(self, service: ChatService, sessions, guide: Guide, learning=None):
        only = TenantViews(Tenant(None, service, sessions, learning), toy=guide.toy)
        self.lookup, self.guide = (lambda _request: only), guide

    @classmethod
    def per_request(cls, lookup, guide: Guide) -> "UiHandlers":
        """The handlers of a UI whose events act for ``lookup(request)`` (a ``TenantViews``)."""
        handlers = cls.__new__(cls)
        handlers.lookup, handlers.guide = lookup, guide
        return handlers

    async def respond(self, text: str, history: list, conv: dict, private: bool, request: gr.Request = None):
        """Send a message; the answer streams into the chat, then the conversation records its turn."""
        on = self.lookup(request)
        text = (text or "").strip()
        if not text:
            yield gr.skip(), history, conv, gr.skip()
            return
        messages = conv["messages"] + [{"role": "user", "content": text}]
        history = history + [{"role": "user", "content": text}]
        async for update in self._answer(on, messages, history, conv, private, restore=text):
            yield update

    async def on_example(
        self, history: list, conv: dict, private: bool, data: gr.SelectData, request: gr.Request = None
    ):
        """A clicked example prompt: sent as if typed."""
        text = (data.value or {}).get("text", "") if isinstance(data.value, dict) else str(data.value or "")
        async for update in self.respond(text, history, conv, private, request):
            yield update

    async def _answer(
        self, on: TenantViews, messages: list[dict], history: list, conv: dict, private: bool, restore: str
    ):
        """Sample the answer to ``messages`` (the last one a user message, the last one in ``history`` too)
        on the user ``on``'s chat service: stream it into the chat, then record its turn. On failure the user
        message goes back into the box (``restore``) and leaves the chat. Yields (box, chat, conversation,
        notice)."""
        prep = await self._prepare(on, messages, conv, private)
        if prep is None:
            yield restore, _chat(history[:-1], conv), conv, gr.skip()
            return
        partial: dict[str, Any] = {"role": "assistant", "content": "", "reasoning_content": ""}
        yield "", _chat(history + shown(partial), conv), conv, gr.skip()
        try:
            async with on.service.stream(prep) as turn:
                async for delta in turn:
                    for key in ("content", "reasoning_content"):
                        if delta.get(key):
                            partial[key] += delta[key]
                    yield gr.skip(), _chat(history + shown(partial), conv), conv, gr.skip()
        except Exception as exc:  # the turn was not stored (the stream aborted it): say so, keep the chat
            gr.Warning(f"Generation failed: {exc}")
            yield restore, _chat(history[:-1], conv), conv, f"Generation failed: {exc}"
            return
        chat, conv, note = self._recorded(history, conv, messages, turn.result)
        yield gr.skip(), _chat(chat, conv), conv, note

    @staticmethod
    async def _prepare(on: TenantViews, messages: list[dict], conv: dict, private: bool):
        """The turn of ``messages`` in this conversation's session, or ``None`` (with a warning) when refused."""
        headers = {
            "x-session-id": conv["session_id"],
            "x-turn-type": "main",
            "x-session-private": "true" if private else "false",
        }
        payload = {"model": on.model, "messages": messages}  # validated as a chat-completions body
        try:
            return await asyncio.to_thread(
                lambda: on.service.prepare(turn_request(payload, headers, on.service.settings))
            )
        except ApiError as err:
            gr.Warning(err.message)
            return None

    @staticmethod
    def _recorded(history: list, conv: dict, messages: list[dict], result) -> tuple[list, dict, str]:
        """The chat, the conversation state and the notice once the answer is stored as a turn."""
        shown = display_assistant(result.message, result.policy_version)
        base = len(history)
        conv = dict(
            conv, messages=messages + [result.message], started=True, last_turn=result.turn_id, target=None
        )
        conv["turn_of"] = dict(conv["turn_of"], **{str(base + i): result.turn_id for i in range(len(shown))})
        conv["part_of"] = dict(conv["part_of"], **{str(base + i): part for i, (part, _) in enumerate(shown)})
        note = f"Answer recorded as turn {result.turn_id} (policy v{result.policy_version})."
        return history + [m for _, m in shown], conv, note

    def on_like(self, conv: dict, data: gr.LikeData, request: gr.Request = None):
        """👍/👎 on any answer: the explicit next state of its turn. After a 👎 the correction box is offered
        (the prompt line; ``FOCUS_CORRECTION_JS`` then focuses the box). Returns (conversation, notice,
        correction prompt)."""
        on = self.lookup(request)
        turn = conv["turn_of"].get(str(event_index(data)))
        if turn is None:
            return conv, "That message has no recorded turn.", ""
        if data.liked not in (True, False):  # the thumb clicked again: Gradio clears it, the server keeps it
            return conv, f"The rating recorded for turn {turn} stays; rate again to change it.", ""
        rating = 1 if data.liked else -1
        try:
            result = self._signal(on.sessions.feedback, turn, rating, None, session=conv["session_id"])
        except ApiError as err:
            return conv, f"Feedback not recorded: {err.message}", ""
        thumb = "👍" if rating > 0 else "👎"
        rated = dict(conv["rated"], **{str(turn): "Like" if rating > 0 else "Dislike"})
        conv = dict(conv, target=turn, rated=rated)
        if not result.attached:
            return conv, f"{thumb} recorded for turn {turn} (not learned from: {result.reason}).", ""
        if rating > 0:
            return conv, f"👍 recorded for turn {turn}.", ""
        return conv, f"👎 recorded for turn {turn}.", correction_prompt(turn, self._seconds_left(on, result))

    @staticmethod
    def _signal(operation, turn, *args, session: str):
        """A per-turn signal of the collector (``sessions.signals``); its refusals as ``ApiError``."""
        with signal_errors():
            return operation(turn, *args, session=session)

    @staticmethod
    def _seconds_left(on, result) -> float | None:
        """How long this 👎 waits for its correction: what the result reports (``correction_seconds_left``,
        a method or a value), else the user ``on``'s configured window; None when the server keeps none."""
        left = getattr(result, "correction_seconds_left", None)
        left = left() if callable(left) else left
        return left if isinstance(left, int | float) and left > 0 else on.window_s

    def on_edit(self, history: list, conv: dict, data: gr.EditData, request: gr.Request = None):
        """An edited answer is a correction of its turn; edits of anything else are put back."""
        on = self.lookup(request)
        index = event_index(data)
        text, before = message_text(data.value).strip(), message_text(data.previous_value)
        if text == before.strip():
            return gr.skip(), conv, gr.skip()  # Gradio sends every message of the edited group
        turn, part = conv["turn_of"].get(str(index)), conv["part_of"].get(str(index))
        put_back = _chat(with_content(history, index, data.previous_value), conv)
        if turn is None or part != "answer" or not text:
            if part == "answer":
                return put_back, conv, "An empty answer is no correction."
            return (
                put_back,
                conv,
                "Only an answer's text can be edited (an edit is a correction of that answer); to change "
                "your message, undo the exchange and send it again.",
            )
        try:
            check_feedback_text(on.service.settings.limits, text)
            result = self._signal(on.sessions.correct, turn, text, "edit", session=conv["session_id"])
        except ApiError as err:
            return put_back, conv, f"Edit not recorded: {err.message}"
        footer = part_index(conv, turn, "version")
        if footer is not None:
            version = on.service.store.conversations.get_turn(turn).policy_version
            history = with_content(history, footer, version_line(version, edited=True))
        if not result.attached:
            note = f"✍️ Edit recorded for turn {turn} (not learned from: {result.reason})."
        else:
            note = f"✍️ Edit recorded as the correction of turn {turn}: the model will learn from it."
        return _chat(history, conv), conv, note

    def on_correct(self, text: str, conv: dict, request: gr.Request = None):
        """A typed correction of the answer rated last (else the latest answer). Returns (box, conversation,
        notice, correction prompt: cleared once a correction is recorded)."""
        on = self.lookup(request)
        text = (text or "").strip()
        turn = conv.get("target") or conv.get("last_turn")
        if not text:
            return gr.skip(), conv, "Write a correction first.", gr.skip()
        if turn is None:
            return gr.skip(), conv, "There is no answer to correct yet.", gr.skip()
        try:
            check_feedback_text(on.service.settings.limits, text)
            result = self._signal(on.sessions.correct, turn, text, session=conv["session_id"])
        except ApiError as err:
            return gr.skip(), conv, f"Correction not recorded: {err.message}", gr.skip()
        if not result.attached:
            note = f"✍️ Correction recorded for turn {turn} (not learned from: {result.reason})."
        else:
            note = f"✍️ Correction recorded for turn {turn}: it is what the model learns from that answer."
        return "", conv, note, ""

    async def on_retry(
        self, history: list, conv: dict, private: bool, data: gr.RetryData, request: gr.Request = None
    ):
        """Retry the last answer: its turn is rejected, and a new answer (a new turn) takes its place."""
        on = self.lookup(request)
        user_index = event_index(data)
        turn = last_exchange_turn(conv, user_index)
        if turn is None:
            yield gr.skip(), gr.skip(), conv, "There is no recorded answer to retry."
            return
        try:
            self._signal(on.sessions.reject, turn, session=conv["session_id"])
            note = f"↻ Turn {turn} rejected (a 👎 without text)."
        except ApiError as err:
            note = f"Rejection not recorded: {err.message}."
        messages = conv["messages"][:-1]  # the last exchange without its answer
        conv = dict(without_after(conv, user_index), messages=messages[:-1])
        restore = message_text(data.value)
        async for box, chat, state, notice in self._answer(
            on, messages, history[: user_index + 1], conv, private, restore
        ):
            yield box, chat, state, (f"{note} {notice}" if isinstance(notice, str) else notice)

    def on_undo(self, history: list, conv: dict, data: gr.UndoData, request: gr.Request = None):
        """Undo the last exchange: its turn is withdrawn (never judged or trained), the message goes back."""
        on = self.lookup(request)
        user_index = event_index(data)
        turn = last_exchange_turn(conv, user_index)
        if turn is None:
            return gr.skip(), gr.skip(), conv, "There is no recorded answer to undo."
        try:
            done = self._signal(on.sessions.withdraw, turn, session=conv["session_id"])
        except ApiError as err:
            return gr.skip(), gr.skip(), conv, f"Undo not recorded: {err.message}"
        conv = without_after(conv, user_index)
        conv = dict(conv, messages=conv["messages"][:-2])
        trained = (
            f" Its sample was already trained on (step {done.trained_step}); that update stays."
            if done.trained_step is not None
            else ""
        )
        note = f"↶ Turn {turn} withdrawn: it will not be judged or trained on.{trained}"
        return message_text(data.value), _chat(history[:user_index], conv), conv, note

    def on_new(self, conv: dict, request: gr.Request = None):
        """End the session (its last answer keeps only explicit feedback) and start a fresh one; its last
        exchange stays in sight under the chat (``chat.previous_exchange``; an empty conversation leaves the
        one shown before). Returns (chat, conversation, "don't learn" switch, notice, correction prompt,
        previous exchange).

        The "don't learn" switch is per conversation, so it resets too.
        """
        on = self.lookup(request)
        try:
            on.sessions.end_session(conv["session_id"])
        except Exception as exc:  # ending is bookkeeping; a new conversation must still start
            gr.Warning(f"could not close the previous session: {exc}")
        previous = previous_exchange(conv["messages"]) or gr.skip()
        return [], new_conversation(), False, "New conversation.", "", previous

    def on_private(self, private: bool, conv: dict, request: gr.Request = None):
        self.lookup(request).sessions.set_private(conv["session_id"], bool(private))
        return (
            "🔒 This conversation will not be learned from."
            if private
            else "This conversation is learned from."
        )

    def refresh(self, request: gr.Request = None):
        """The learning panel's views (``layout.Components.panel``) of the user's own learning, refreshed
        every ``STATUS_EVERY_S``: a chart shows once it has data."""
        on = self.lookup(request)
        try:
            status = on.service.status()
            summary, hints, rewards, hint_rates = on.panel(status)
        except Exception as exc:  # a status hiccup must not spam error toasts every tick
            return [f"_Learning status unavailable: {html.escape(str(exc))}_"] + [gr.skip()] * (
                3 + (on.changed is not None)
            )
        views = [
            summary,
            hints,
            gr.update(value=reward_chart(rewards), visible=has_points(rewards)),
            gr.update(value=hint_chart(hint_rates), visible=not hint_rates.empty),
        ]
        if on.changed is not None:
            views.append(on.changed.markdown(int(status.get("policy_version") or 0)))
        return views


def _wire(demo, c: Components, on: UiHandlers) -> None:
    """Connect each component's events to its handler; the panel refreshes on load and on a timer."""
    chat_io = dict(inputs=[c.box, c.chatbot, c.conv, c.private], outputs=[c.box, c.chatbot, c.conv, c.notice])
    c.box.submit(on.respond, **chat_io)
    c.send.click(on.respond, **chat_io)
    c.chatbot.example_select(on.on_example, inputs=[c.chatbot, c.conv, c.private], outputs=chat_io["outputs"])
    c.chatbot.like(on.on_like, inputs=[c.conv], outputs=[c.conv, c.notice, c.correction_prompt]).then(
        None, js=FOCUS_CORRECTION_JS
    )
    c.chatbot.edit(on.on_edit, inputs=[c.chatbot, c.conv], outputs=[c.chatbot, c.conv, c.notice])
    c.chatbot.retry(on.on_retry, inputs=[c.chatbot, c.conv, c.private], outputs=chat_io["outputs"])
    c.chatbot.undo(on.on_undo, inputs=[c.chatbot, c.conv], outputs=[c.box, c.chatbot, c.conv, c.notice])
    correct_io = dict(
        inputs=[c.correction, c.conv], outputs=[c.correction, c.conv, c.notice, c.correction_prompt]
    )
    c.correct.click(on.on_correct, **correct_io)
    c.correction.submit(on.on_correct, **correct_io)
    new_io = dict(
        inputs=[c.conv], outputs=[c.chatbot, c.conv, c.private, c.notice, c.correction_prompt, c.previous]
    )
    c.new.click(on.on_new, **new_io)
    c.chatbot.clear(on.on_new, **new_io)  # the chat's 🗑: a new conversation, as the button
    c.private.input(on.on_private, inputs=[c.private, c.conv], outputs=[c.notice])
    gr.Timer(STATUS_EVERY_S).tick(on.refresh, outputs=c.panel, show_progress="hidden", queue=False)
    demo.load(on.refresh, outputs=c.panel)


def build_ui(tenants: Mapping[str | None, Tenant], title: str | None = None):
    """The ``gr.Blocks`` app (mounted at ``/`` by ``serving.app``). ``tenants``: ``{None: tenant}`` with one
    user, ``{name: tenant}`` with several (behind Gradio's login, each event for the logged-in user:
    ``ui.tenants``); a tenant's service answers, its collector takes the signals, its learning control backs the
    version controls (``ui.versions``). ``title``: the tab's title (default: the guide's, ``ui.guide``)."""
    first = next(iter(tenants.values()), None)
    if first is None:
        raise ValueError("the UI needs at least one tenant")
    service = first.service
    guide = guide_for(
        service.settings.model_id or getattr(service.engine, "model_path", None),
        service.status().get("batch_size"),
    )
    lookup = TenantLookup(tenants, toy=guide.toy)
    handlers = UiHandlers.per_request(lookup, guide)
    versions = VersionControls(lookup, lookup.only)
    with gr.Blocks(title=title or guide.title) as demo:
        _wire(demo, layout(guide, versions), handlers)
        versions.wire(demo)
        if lookup.only is None:  # several users: say whose adapter this page teaches
            signed_in = gr.Markdown(elem_id="signed-in")
            demo.load(signed_in_line, outputs=signed_in)
    demo.queue(default_concurrency_limit=16)
    return demo
