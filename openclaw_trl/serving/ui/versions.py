"""The learning panel's version controls: the adapter versions, a rollback, the pause switch, and "Did it
learn for me?" (your recent prompts answered by the base model and by the current adapter, same seed).

``VersionControls.build`` lays the components out inside the panel column; ``wire`` connects their events.
They call the same ``LearningControl`` as ``/v1/adapters``, ``/v1/adapters/rollback`` and ``/v1/learning``
(``None`` on a server that does not train: the version part then says so; the comparison still works).
Each event acts for the user ``lookup(request)`` returns (``ui.tenants``): on a server with several
users, the logged-in user's versions, rollback, pause and prompts only.
"""

import asyncio
import html
import time

import gradio as gr

from openclaw_trl.compare import compare_base_and_policy, distinct_prompt_turns, markdown_table
from openclaw_trl.engines.base import SamplingParams
from openclaw_trl.serving.ui.quality import last_clean_version, plain_reason
from openclaw_trl.serving.ui.tenants import TenantViews
from openclaw_trl.trainer.control import (
    LearningUnavailable,
    NotRestorable,
    RollbackTimeout,
    UnknownVersion,
)

COMPARE_PROMPTS = 3
"""Recent distinct prompts the "Did it learn for me?" button replays (each once, however often it was asked)."""
COMPARE_MAX_TOKENS = 96
"""Tokens per replayed reply (at most the server's default ``max_tokens``)."""
REFRESH_S = 2.0


def version_label(v, notes: dict[int, str]) -> str:
    """What a version is, in words: "v0: initial", "v3: update 3", "v10: rollback to v0", "v7: held back
    (v6's weights)", "v5: resumed from v4". ``v``: a ``VersionInfo``; ``notes``: the lineage's note per
    version (``initial`` / ``update`` / ``rollback`` / ``resume`` / ``held: <why>``)."""
    note = notes.get(v.version, "")
    if v.version == 0:
        return "v0: initial"
    if note.startswith("held"):
        kept = f" (v{v.restored_from}'s weights)" if v.restored_from is not None else ""
        return f"v{v.version}: held back{kept}"
    if v.restored_from is not None:
        verb = "resumed from" if note == "resume" else "rollback to"
        return f"v{v.version}: {verb} v{v.restored_from}"
    return f"v{v.version}: update {v.version}"


def lineage_notes(store, versions: list) -> dict[int, str]:
    """The lineage's note of each of ``versions`` (empty for one it did not record)."""
    out = {}
    for v in versions:
        published = store.lineage.published_version(v.version)
        out[v.version] = published.note if published is not None else ""
    return out


def versions_markdown(
    versions: list,
    paused: bool,
    trainer_state: str | None,
    waiting: int,
    notes: dict[int, str] | None = None,
    clean: int | None = None,
) -> str:
    """The version list as a Markdown table, newest first, with the learning state above it: each version
    says what it is (``version_label``), the ``clean`` one (``quality.last_clean_version``) is marked."""
    notes = notes or {}
    state = "paused: no updates until you resume" if paused else (trainer_state or "learning")
    lines = [f"**Learning:** {html.escape(state)} ({waiting} judged samples queued)"]
    if not versions:
        lines.append("_No adapter versions yet: the first one is saved when training starts._")
        return "  \n".join(lines)
    lines += ["", "| version | saved | samples | reward | state |", "|---|---|---|---|---|"]
    for v in versions:
        name = version_label(v, notes)
        samples = v.samples if v.version > 0 and v.restored_from is None else "–"
        reward = v.metrics.get("reward")
        reward = f"{reward:+.2f}" if isinstance(reward, int | float) else "–"
        marks = ["**serving**"] if v.serving else []
        if v.version == clean:
            marks.append("✅ **last clean**")
        if notes.get(v.version, "").startswith("held"):
            marks.append("⚠️ " + html.escape(plain_reason(notes[v.version].partition(":")[2])))
        if not v.restorable and not v.serving:
            marks.append("checkpoint gone")
        saved = time.strftime("%H:%M:%S", time.localtime(v.created))
        lines.append(
            f"| {'**' + name + '**' if v.serving else name} | {saved} | {samples} | {reward} | {', '.join(marks)} |"
        )
    if clean is not None:
        lines += ["", f"_v{clean} is the last clean version: its answers passed the quality check._"]
    return "\n".join(lines)


def guard_limits(on: TenantViews) -> dict | None:
    """The bounds of the user's version guard (as ``/v1/status`` names them), None when unknown."""
    try:
        return (on.service.status().get("guard") or {}).get("limits")
    except Exception:  # the defaults then apply
        return None


class VersionControls:
    """The components and their handlers (one method per event). ``lookup(request)``: the ``TenantViews``
    (chat service, learning control) an event acts for; ``initial``: the views the page is first drawn with
    (the only user's; None with several users, whose lists the page's load then fills in)."""

    def __init__(self, lookup, initial: TenantViews | None = None):
        self.lookup, self.initial = lookup, initial

    # -- layout ------------------------------------------------------------------------------------

    def build(self) -> None:
        if self.initial is not None:
            table, choices, _ = self._listing(self.initial)
        else:
            table, choices = "_Loading your versions…_", {}
        with gr.Accordion("Adapter versions", open=True, elem_id="versions-box"):
            self.table = gr.Markdown(table, elem_id="versions")
            with gr.Row(equal_height=True):
                self.choice = gr.Dropdown(
                    label="Roll back to",
                    choices=choices.get("choices", []),
                    value=choices.get("value"),
                    scale=3,
                    elem_id="rollback-version",
                    interactive=True,
                )
                self.rollback = gr.Button("Roll back", scale=1, elem_id="rollback")
            self.pause = gr.Checkbox(
                label="Pause learning (chatting and feedback go on; no updates)",
                value=False,
                elem_id="pause-learning",
            )
            self.note = gr.Markdown("", elem_id="versions-notice")
        with gr.Accordion("Did it learn for me?", open=True, elem_id="did-it-learn-box"):
            gr.Markdown(
                f"Your last {COMPARE_PROMPTS} different prompts (not the private ones) answered by the base model "
                "and by the current adapter, with the same seed."
            )
            self.compare = gr.Button("Did it learn for me?", elem_id="did-it-learn")
            self.comparison = gr.Markdown("", elem_id="comparison")

    def wire(self, demo) -> None:
        listing = [self.table, self.choice, self.pause]
        gr.Timer(REFRESH_S).tick(
            self.refresh, inputs=[self.choice], outputs=listing, show_progress="hidden", queue=False
        )
        demo.load(self.refresh, inputs=[self.choice], outputs=listing)
        self.rollback.click(self.on_rollback, inputs=[self.choice], outputs=[self.note, *listing])
        # the listing keeps the version the person chose while it stays restorable
        self.pause.input(self.on_pause, inputs=[self.pause], outputs=[self.note])
        self.compare.click(self.on_compare, outputs=[self.comparison])

    # -- events ------------------------------------------------------------------------------------

    def refresh(self, chosen=None, request: gr.Request = None):
        """The user's version list, the rollback choices (restorable versions but the serving one: the last
        clean version first, then newest first) with ``chosen`` kept while it is one of them, else the last
        clean version (when another one serves), else the newest one update back, and the switch."""
        return self._listing(self.lookup(request), chosen)

    def _listing(self, on: TenantViews, chosen=None):
        learning = on.learning
        if learning is None:
            note = "_This server does not train: no versions to list, roll back or pause._"
            return note, gr.update(choices=[], interactive=False), gr.update(interactive=False)
        try:
            versions, paused = learning.versions(), learning.paused
        except Exception as exc:  # a hiccup must not spam error toasts every tick
            return f"_Versions unavailable: {html.escape(str(exc))}_", gr.skip(), gr.skip()
        store = on.service.store
        notes = lineage_notes(store, versions)
        held = {v for v, note in notes.items() if note.startswith("held")}
        path = store.lineage.lineage().path(learning.serving_version)
        clean = last_clean_version(versions, held, guard_limits(on), path)
        offered = [v for v in versions if v.restorable and not v.serving]
        offered.sort(key=lambda v: v.version != clean)  # the last clean version first, then newest first
        choices = [
            (version_label(v, notes) + (" · last clean" if v.version == clean else ""), v.version)
            for v in offered
        ]
        waiting = store.queue.count_waiting()
        table = versions_markdown(versions, paused, learning.trainer_state, waiting, notes, clean)
        values = [value for _, value in choices]
        if chosen in values:
            value = chosen
        elif clean in values and path.get(clean, 0) >= 1:  # the serving weights are not the last clean ones
            value = clean
        else:
            value = self._one_update_back(on, values)
        return table, gr.update(choices=choices, value=value), gr.update(value=paused)

    @staticmethod
    def _one_update_back(on: TenantViews, values: list[int]) -> int | None:
        """The newest of ``values`` whose weights the serving version's were trained from (at least one update
        back on its lineage: after a rollback to v1, v0 rather than the undone v2); None when there is none."""
        back = on.service.store.lineage.lineage().path(on.learning.serving_version)
        return next((v for v in values if back.get(v, 0) >= 1), None)

    async def on_rollback(self, version, request: gr.Request = None):
        on = self.lookup(request)
        if on.learning is None:
            return "This server does not train.", *self._listing(on)
        if version is None:
            return "Choose a version to roll back to first.", *self._listing(on)
        try:
            result = await asyncio.to_thread(on.learning.rollback, int(version))
        except (UnknownVersion, NotRestorable, LearningUnavailable, RollbackTimeout) as err:
            return f"Not rolled back: {html.escape(str(err))}", *self._listing(on)
        note = (
            f"Rolled back to v{result.restored_from}: its weights now serve as v{result.policy_version}, and "
            f"training continues from them. {result.samples_rolled_back} samples of the undone updates will not "
            "be trained on again."
        )
        return note, *self._listing(on)

    def on_pause(self, paused: bool, request: gr.Request = None):
        learning = self.lookup(request).learning
        if learning is None:
            return "This server does not train."
        learning.set_paused(bool(paused))
        if paused:
            return "Learning paused: keep chatting and rating; the trainer waits (an update already running ends)."
        return "Learning resumed: the next batch of judged samples updates the adapter."

    async def on_compare(self, request: gr.Request = None):
        service = self.lookup(request).service
        turns = await asyncio.to_thread(distinct_prompt_turns, service.store, COMPARE_PROMPTS)
        if not turns:
            return '_No prompts yet: chat first (conversations marked "don\'t learn" are left out)._'
        settings = service.settings
        sampling = SamplingParams(
            temperature=settings.train_temperature,
            max_new_tokens=min(settings.default_max_tokens, COMPARE_MAX_TOKENS),
            seed=0,
        )
        version = getattr(service.engine, "policy_version", 0)
        try:
            pairs = await asyncio.to_thread(compare_base_and_policy, service.engine, turns, sampling)
        except Exception as exc:
            return f"_The comparison failed: {html.escape(str(exc))}_"
        return markdown_table(pairs, "Base model", f"Current adapter (v{version})")
