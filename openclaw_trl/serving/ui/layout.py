"""The page's layout: the guide's header, the chat column (chat with its example prompts, message box,
conversation controls, the correction box and its prompt line, what each control teaches) and the learning
panel (summary, what changed, hints, charts hidden until they have data, then the version controls).
``layout`` returns the components the events of ``openclaw_trl.serving.ui.blocks`` read and write.
"""

from dataclasses import dataclass
from typing import Any

import gradio as gr

from openclaw_trl.serving.ui.chat import new_conversation
from openclaw_trl.serving.ui.guide import Guide, controls_markdown
from openclaw_trl.serving.ui.versions import VersionControls


@dataclass
class Components:
    """The components the events read and write."""

    conv: Any
    chatbot: Any
    box: Any
    send: Any
    new: Any
    private: Any
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
            height=460,
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
    with gr.Accordion("What each control teaches", open=False, elem_id="controls-help"):
        gr.Markdown(controls_markdown())
    return c


def _learning_panel(guide: Guide) -> list:
    """The status panel: the summary in words, the hints learned, the curves (hidden until they have data)
    and, for the toy model, what changed in its answers."""
    gr.Markdown("### Learning")
    summary = gr.Markdown("", elem_id="learning-status")
    changed = None
    if guide.toy:
        gr.Markdown("**What changed**")
        changed = gr.Markdown("", elem_id="what-changed")
    gr.Markdown("**Hints learned**")
    hints = gr.Markdown("", elem_id="hints")
    # points, not lines: a line needs two updates to show, and an undone update is a point of its own colour;
    # "~g": updates read 1, 2, 3 (not 1.000000)
    reward_plot = gr.ScatterPlot(
        x="step",
        y="reward",
        color="series",
        title="Average reward per update",
        x_title="update",
        y_title="average reward",
        x_axis_format="~g",
        height=220,
        y_lim=[-1, 1],
        visible=False,
        elem_id="reward-chart",
    )
    hint_plot = gr.ScatterPlot(
        x="step",
        y="hint_accept_rate",
        title="Share of hints the teacher accepted, per update",
        x_title="update",
        y_title="accepted",
        x_axis_format="~g",
        height=200,
        y_lim=[0, 1],
        visible=False,
        elem_id="hint-chart",
    )
    return [summary, hints, reward_plot, hint_plot] + ([changed] if changed is not None else [])


def layout(guide: Guide, versions: VersionControls | None = None) -> Components:
    """The page: the guide's header, the chat column on the left, the learning panel (and ``versions``) on
    the right."""
    conv = gr.State(new_conversation())
    gr.Markdown(guide.header, elem_id="header")
    with gr.Row():
        with gr.Column(scale=3):
            chat = _chat_column(guide)
        with gr.Column(scale=2):
            panel = _learning_panel(guide)
            if versions is not None:
                versions.build()
    return Components(conv=conv, panel=panel, **chat)
