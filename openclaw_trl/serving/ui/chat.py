"""The chat column's state and display, without Gradio: which displayed message belongs to which turn, how
an assistant turn is shown (reasoning block, answer, the muted policy-version line), and the bookkeeping of
edit / retry / undo on that state. The version line is display only: the conversation the model sees
(``conv["messages"]``) and the stored turn never contain it.
"""

from __future__ import annotations

import html
import uuid

from openclaw_trl.chat import flatten_content

REASONING_TITLE = "💭 Reasoning"
VERSION_PREFIX = "policy v"
"""How the muted line under each answer starts: plain text (a screen reader reads each message's text as its
label, so no markup), muted by ``UI_CSS`` through that label."""
UI_CSS = f"""
#chat [aria-label^="bot's message: {VERSION_PREFIX}"] {{ font-size: 0.78em; opacity: 0.6; }}
#chat .bubble-wrap {{ padding-top: 2.5rem; }}
"""
"""The version line muted; room above the first message for the chat's toolbar (🗑, copy), which floats over
the top of the chat."""


def new_conversation() -> dict:
    """Per-browser-tab state: the API messages, and which displayed message belongs to which turn."""
    return {
        "session_id": f"ui-{uuid.uuid4().hex[:16]}",
        "messages": [],  # the conversation as the API sees it (reasoning + tool calls kept)
        "turn_of": {},  # displayed message index (str, JSON state) -> turn id
        "part_of": {},  # displayed message index (str) -> reasoning / answer / version
        "rated": {},  # turn id (str) -> "Like" / "Dislike": the thumbs shown (the store has every rating)
        "target": None,  # turn id the next typed correction applies to (last rated, else last answer)
        "last_turn": None,
        "started": False,
    }


PREVIOUS_CHARS = 400
"""The most characters of each message the previous-conversation line quotes."""


def previous_exchange(messages: list[dict]) -> str:
    """The last exchange of a conversation that just ended (``conv["messages"]``), as a Markdown block shown
    under the chat: the last message you sent and the answer to it ("" when there is none)."""
    user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    if user is None:
        return ""
    after = messages[messages.index(user) + 1 :]
    answer = next((m for m in after if m.get("role") == "assistant"), None)

    def quote(message) -> str:
        text = html.escape(flatten_content(message.get("content")) or "").strip()
        text = text if len(text) <= PREVIOUS_CHARS else text[:PREVIOUS_CHARS] + "…"
        return "  \n".join("> " + line for line in (text or "…").splitlines())

    lines = ["**Previous conversation, last exchange**", "", "**You:**", quote(user)]
    if answer is not None:
        lines += ["", "**Model:**", quote(answer)]
    return "\n".join(lines)


def version_line(version, edited: bool = False) -> str:
    note = " · ✍️ edited: your version is its correction" if edited else ""
    return f"{VERSION_PREFIX}{version}{note}"


def display_assistant(message: dict, version=None) -> list[tuple[str, dict]]:
    """One assistant turn -> (part, chatbot message): a collapsible reasoning block, the answer, and the
    policy version line once the turn is recorded."""
    out = []
    if message.get("reasoning_content"):
        meta = {"title": REASONING_TITLE, "status": "done"}
        out.append(
            ("reasoning", {"role": "assistant", "content": message["reasoning_content"], "metadata": meta})
        )
    text = message.get("content") or ""
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        text += f"\n\n🔧 `{fn.get('name')}({fn.get('arguments', '')})`"
    out.append(("answer", {"role": "assistant", "content": text.strip() or "…"}))
    if version is not None:
        out.append(("version", {"role": "assistant", "content": version_line(version)}))
    return out


def shown(message: dict, version=None) -> list[dict]:
    return [m for _, m in display_assistant(message, version)]


def message_text(value) -> str:
    """The text of a chatbot message value (a string, a content part or a list of parts)."""
    return flatten_content([value] if isinstance(value, dict) else value)


def event_index(data) -> int:
    return data.index[0] if isinstance(data.index, list | tuple) else data.index


def last_exchange_turn(conv: dict, user_index: int) -> int | None:
    """The turn of the answer after the displayed user message ``user_index`` (retry / undo)."""
    after = {int(i): t for i, t in conv["turn_of"].items() if int(i) > user_index}
    return after[max(after)] if after else None


def feedback_values(conv: dict) -> list[str | None]:
    """The thumbs to show, one per answer in display order (Gradio's ``feedback_value``)."""
    first: dict = {}
    for index, turn in conv["turn_of"].items():
        first[turn] = min(first.get(turn, int(index)), int(index))
    return [conv["rated"].get(str(turn)) for turn in sorted(first, key=first.get)]


def with_content(history: list, index: int, content) -> list:
    """The chat with message ``index``'s content replaced (an edit put back, a version line updated)."""
    history = list(history)
    history[index] = dict(history[index], content=content)
    return history


def part_index(conv: dict, turn: int, part: str) -> int | None:
    """The displayed index of ``turn``'s ``part`` (reasoning / answer / version), None when not shown."""
    found = [int(i) for i, p in conv["part_of"].items() if p == part and conv["turn_of"].get(i) == turn]
    return found[0] if found else None


def without_after(conv: dict, user_index: int) -> dict:
    """The conversation state without the displayed messages after ``user_index`` (retry / undo)."""
    keep = lambda mapping: {i: v for i, v in mapping.items() if int(i) < user_index}  # noqa: E731
    last = [t for _, t in sorted(keep(conv["turn_of"]).items(), key=lambda kv: int(kv[0]))]
    return dict(
        conv,
        turn_of=keep(conv["turn_of"]),
        part_of=keep(conv["part_of"]),
        last_turn=last[-1] if last else None,
        target=None,
    )


FOCUS_CORRECTION_JS = """() => {
  const prompt = document.getElementById('correction-prompt');
  const box = document.querySelector('#correction textarea');
  if (prompt && box && prompt.innerText.trim()) {
    box.scrollIntoView({block: 'nearest'});
    box.focus();
  }
}"""
"""After a 👎: bring the correction box into view and focus it (the prompt line is shown only then)."""
