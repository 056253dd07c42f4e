"""What the UI says about itself: the page title, the header naming the model that serves, the example
prompts, one line per control on what it teaches, and the line offered after a 👎.

The offline toy model (``model_id`` = ``openclaw-trl/toy``) gets its own guide, built from its world
(:mod:`openclaw_trl.toy.world`): the topics it knows, the four answer styles and what to type. Any other
model gets its name, one line on how to teach it and a few generic example prompts. No Gradio here: the
guide is text, laid out by ``openclaw_trl.serving.ui.blocks``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from openclaw_trl.toy import TOY_MODEL_ID, world

STYLE_WORDS = {
    "bullets": ("bulleted", ""),
    "numbered": ("numbered", ""),
    "formal": ("formal", ' ("Certainly. …")'),
    "casual": ("casual", ' ("Hey, …")'),
    "other": ("in none of the four styles", ""),
}
"""How the toy world's style names read in a sentence: (adjective, what such an answer starts with)."""

TOY_EXAMPLE_TOPICS = ("apples", "music", "the weather", "python")
"""The toy's clickable examples: "Tell me about <topic>." for these topics."""
GENERIC_EXAMPLES = (
    "Explain what a LoRA adapter is in two sentences.",
    "Write a haiku about autumn.",
    "Give me three tips for writing clear emails.",
)

CONTROLS = (
    ("👍 / 👎", "rates that answer: the rating is what the model learns from that turn"),
    ("✎ edit", "rewrite an answer into what it should have said: your version is learned as a correction"),
    ("↻ retry", "the last answer is rejected (learned as a 👎) and a new one is sampled"),
    ("↶ undo", "takes back the last exchange: nothing is learned from it"),
    ("Correction box", "what the answer you rated last (else the latest one) should have said"),
    ("New conversation", "starts over; the previous conversation still counts"),
    ("Don't learn", "this conversation is kept out of training (and out of “Did it learn for me?”)"),
    ("Roll back", "serves an earlier version again; the updates after it are undone, never retrained"),
)
"""(control, what it does to learning): the lines under the chat."""


@dataclass(frozen=True)
class Guide:
    """The text of one model's UI."""

    title: str  # the browser tab and the page heading
    header: str  # Markdown: which model serves, what it knows, what to type
    examples: tuple[str, ...]  # clickable example prompts (shown while the chat is empty)
    placeholder: str  # Markdown shown in the empty chat
    toy: bool  # the offline toy model (its panel says what changed in its answers' styles)


def guide_for(model_id: str | None, batch_size: int | None = None) -> Guide:
    """The guide of the model ``model_id`` names (a recipe's ``model_name_or_path``, or a model directory:
    shown by its folder name);
    ``batch_size``: the rated answers per update, quoted in the toy's header."""
    if model_id == TOY_MODEL_ID:
        return _toy_guide(batch_size)
    name = (Path(model_id).name if Path(model_id).is_dir() else model_id) if model_id else "the model"
    return Guide(
        title=f"Chat with {name}: it learns from you",
        header=(
            f"## Chat with `{name}`: it learns from you\n"
            "Talk to it as usual: your next message, your 👍/👎 and your corrections are turned into "
            "learning signals, and a LoRA adapter is updated online (the panel on the right shows each update)."
        ),
        examples=GENERIC_EXAMPLES,
        placeholder="Ask anything, then rate or correct the answer to teach it.",
        toy=False,
    )


def _toy_guide(batch_size: int | None) -> Guide:
    topics = ", ".join(world.TOPICS[:-1]) + f" or {world.TOPICS[-1]}"
    words = ["".join(STYLE_WORDS.get(s, (s, ""))) for s in world.STYLE_NAMES]
    styles = ", ".join(words[:-1]) + f" or {words[-1]}"
    every = f"every {batch_size} ratings" if batch_size else "every few ratings"
    return Guide(
        title="Teach the toy model your favourite answer style",
        header=(
            "## Teach the toy model your favourite answer style\n"
            "This is the offline demo: a tiny model pre-trained on a made-up world. It knows one request, "
            f"*Tell me about &lt;topic&gt;.*, for {topics}, and answers in one of four styles at random: "
            f"{styles}, stating one to three facts. To anything else it answers with what it knows.  \n"
            "**Try it:** click an example, 👍 the answers in the style you like and 👎 the others (or write "
            f"what it should have said). The model is updated {every}; after about eight updates most answers "
            "come in your style."
        ),
        examples=tuple(world.opening(t) for t in TOY_EXAMPLE_TOPICS if t in world.TOPICS),
        placeholder="Ask *Tell me about apples.* (or another topic), then rate the answer.",
        toy=True,
    )


def controls_markdown() -> str:
    """One line per control: what it does to learning."""
    return "  \n".join(f"**{name}**: {what}" for name, what in CONTROLS)


def correction_prompt(turn: int, window_s: float | None) -> str:
    """The line offered after a 👎: the correction is what will be learned. ``window_s``: how long the server
    keeps a rating from training while a correction may follow (``None``: it keeps none, and a correction
    replaces the 👎 as long as the turn was not trained on yet)."""
    if window_s:
        when = f"within {round(window_s):d} s (and before your next message)"
    else:
        when = "before the next update trains on it"
    return (
        f"**What should it have said?** Write it below (or ✎ edit the answer): a correction {when} "
        f"replaces the 👎 on turn {turn} and is what the model learns."
    )
