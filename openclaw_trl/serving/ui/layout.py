"""The page's layout: the guide's header, the chat column (chat with its example prompts, message box,
conversation controls, the previous conversation's last exchange, the correction box and its prompt line, what
each control teaches) and the learning panel (summary, what changed, charts hidden until they have data, hints,
then the version controls), at most as tall as the chat column (``PAGE_CSS``: it scrolls past that).
``layout`` returns the components the events of ``openclaw_trl.serving.ui.blocks`` read and write.
"""

from dataclasses import dataclass
from typing import Any

import gradio as gr

from openclaw_trl.serving.ui.chat import UI_CSS, new_conversation
from openclaw_trl.serving.ui.guide import Guide, controls_markdown
from openclaw_trl.serving.ui.versions import VersionControls

CHAT_HEIGHT = 560
"""The chat's height (px)."""
PANEL_MAX_HEIGHT = 900
"""The learning panel column's height at most (px; about the chat column's): longer, it scrolls."""
PAGE_CSS = (
    UI_CSS
    + f"""
#page-row {{ align-items: flex-start; }}
#learning-panel {{ max-height: {PANEL_MAX_HEIGHT}px; overflow-y: auto; overflow-x: hidden; flex-wrap: nowrap; }}
#learning-panel > * {{ flex-shrink: 0; }}
#previous-conversation {{ max-height: 220px; overflow-y: auto; font-size: 0.9em; opacity: 0.85; }}
#reward-chart svg, #hint-chart svg {{ display: block; margin: 0 auto; }}
"""
)
"""The page's style: the chat's (``chat.UI_CSS``), and a learning panel as tall as the chat column at most
(it scrolls past that, its parts collapse)."""


@dataclass
class Components:
    """The components the events read and write."""

    conv: Any
    chatbot: Any
    box: Any
    send: Any
    new: Any
    private: Any
    previous: Any  # the previous conversation's last exchange
    correction_prompt: Any
    correction: Any
    correct: Any
    notice: Any
    panel: (
        list  # summary, hints, reward plot, hint-rate plot (+ what changed): ``UiHandlers.refresh``, in order
    )


def _chat_column(guide: Guide) -> dict:
    """The chat (with the example prompts), the message box, the conversation controls, the correction box
    and one line per control on what it teaches."""
    c = {
        "chatbot": gr.Chatbot(
            label="Chat",
            show_label=False,
            height=CHAT_HEIGHT,
            elem_id="chat",
            feedback_options=("Like", "Dislike"),
            editable="all",  # Gradio has no "assistant only": edits of your own messages are put back
            buttons=["copy", "copy_all"],  # no "share" (to Hugging Face Spaces discussions)
            autoscroll=True,
            examples=[{"text": text} for text in guide.examples] or None,
            placeholder=guide.placeholder,
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
    c["correction_prompt"] = gr.Markdown("", elem_id="correction-prompt")
    with gr.Row():
        c["correction"] = gr.Textbox(
            placeholder="Correct the answer you rated last: what should it have said?",
            show_label=False,
            scale=5,
            elem_id="correction",
        )
        c["correct"] = gr.Button("Send correction", scale=1, elem_id="send-correction")
    c["notice"] = gr.Markdown("", elem_id="notice")
    c["previous"] = gr.Markdown("", elem_id="previous-conversation")
    with gr.Accordion("What each control teaches", open=False, elem_id="controls-help"):
        gr.Markdown(controls_markdown())
    return c


def _learning_panel(guide: Guide) -> list:
    """The status panel: the summary in words (quality included), what changed in the toy model's answers,
    the curves (hidden until they have data) and the hints learned, each part in an accordion."""
    gr.Markdown("### Learning")
    summary = gr.Markdown("", elem_id="learning-status")
    changed = None
    if guide.toy:
        with gr.Accordion("What changed", open=True, elem_id="what-changed-box"):
            changed = gr.Markdown("", elem_id="what-changed")
    with gr.Accordion("Curves", open=True, elem_id="curves"):
        reward_plot = gr.HTML("", visible=False, elem_id="reward-chart")
        hint_plot = gr.HTML("", visible=False, elem_id="hint-chart")
    with gr.Accordion("Hints learned", open=True, elem_id="hints-box"):
        hints = gr.Markdown("", elem_id="hints")
    return [summary, hints, reward_plot, hint_plot] + ([changed] if changed is not None else [])


def layout(guide: Guide, versions: VersionControls | None = None) -> Components:
    """The page: the guide's header, the chat column on the left, the learning panel (and ``versions``) on
    the right."""
    conv = gr.State(new_conversation())
    gr.Markdown(guide.header, elem_id="header")
    with gr.Row(elem_id="page-row"):
        with gr.Column(scale=3, elem_id="chat-column"):
            chat = _chat_column(guide)
        with gr.Column(scale=2, elem_id="learning-panel"):
            panel = _learning_panel(guide)
            if versions is not None:
                versions.build()
    return Components(conv=conv, panel=panel, **chat)
