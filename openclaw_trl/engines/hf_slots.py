"""Which LoRA adapter each device slot of the Transformers engine holds: one adapter per user, LRU, double-buffered.

Terms. An *adapter* is named by a user's name, or ``None`` for a run with a single adapter (``None`` is just one
more name: one engine may serve it next to named users). A *publish* gives a name new weights and a version;
each name's latest publish is kept on the CPU as the authoritative copy (``Published``; pinned memory on CUDA,
so a copy to the device is fast). The device has ``max_adapters + 1`` *slots* (``K + 1``), each holding one
publish's weights or nothing. A name is *resident* when a slot holding its latest publish is mapped to it;
at most ``K`` names are resident, the least recently used one losing its place first. The extra slot is the
double buffer: it holds the weights that a remap left behind while work still runs on them, or takes the next
publish or refill.

Rules (all bookkeeping under one condition variable; weight copies run outside it):

* **Pins.** Work pins the slot it runs on (``pin``) and releases it at its end (``unpin``). A pinned slot is
  never overwritten, so work in flight finishes on the weights it started with and the version reported with
  its result is the version of those weights. Losing residency (a remap or an eviction) does not disturb a
  pinned slot: it only stops new work from choosing it.
* **Reservations.** A slot being written (by a publish or a refill) is *reserved*: it is mapped to nobody and
  nobody pins it, so nobody ever reads half-copied weights. It is mapped only once the copy is complete.
* **A free slot** for a copy is one that is neither pinned, nor reserved, nor mapped to the name being
  written. Empty slots go first, then slots that hold weights nobody is mapped to, then the slot of the least
  recently used resident name (that name is *evicted*: its CPU copy stays, its next request refills).
* **Publish** (a caller's thread, one publish at a time). When the name is not resident, the new CPU copy and
  version are recorded and that is all: its next request refills a slot (no other user loses a slot for an
  adapter nobody is using). When it is resident, the new weights are copied into a free slot (waiting, on the
  publisher's thread, for one), and then, atomically, the name is remapped to that slot and its version and
  CPU copy switch. Its old slot stays intact while pinned.
* **Refill** (the engine's worker thread, when work for a non-resident name with a publish starts): the name's
  latest CPU copy is copied into a free slot, which the new work pins at once, and the name is mapped to it
  (unless a publish for that name completed meanwhile: the work then runs on what it started with, reported
  with that version, and the name stays mapped to the newer weights).
* **Never a deadlock on the worker thread.** Pins are held only by tasks of the worker, which runs at most two
  at a time (one ``serve`` task run to its end, and one ``learn`` task advanced a piece at a time between
  them), each pinning one slot. A refill happens when a task starts, so at most one *other* slot is pinned
  then, and with ``K + 1 >= 2`` slots at least one is unpinned. If that one is reserved by a publisher, the
  worker waits for that copy to finish: a publisher that holds a reservation never waits for anything, so
  the wait is bounded by one copy. If nothing could ever free up (which these counts exclude) the work fails
  with an error instead of hanging. A publisher, in turn, may wait for pins to be released; the worker never
  waits for a publisher that has not yet reserved its slot.
* **Several pins per task (mixed batches).** A decode batch may hold rows of several adapters: it pins one
  slot per adapter. Its first adapter is pinned as above; every further one with ``spare``: it is pinned only
  if that needs no wait and leaves ``spare`` other slots neither pinned nor reserved, otherwise it is refused
  (``None``) and its rows wait for a later batch. A ``serve`` task pins its extras with ``spare=0`` (no other
  task starts while it runs); a ``learn`` task with ``spare=1``, so a ``serve`` task started in between still
  finds an unpinned slot for its first adapter: the argument above holds unchanged.
* **Names without a publish** serve the base weights at version 0 (``policy`` = ``base`` until the first
  publish, as for a single adapter).

``key_of(slot)`` names the weights a slot holds (one per publish: a refill of the same publish gives the same
key, since it copies the same CPU tensors); the prefix cache keys its entries with it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

BASE = "base"

REFILL_WAIT_S = 60.0
"""Longest a refill waits for a publisher's copy to finish before failing its work (a copy takes milliseconds)."""


@dataclass(frozen=True, eq=False)
class Published:
    """One publish of one adapter: the authoritative CPU copy of its weights, its version and a unique serial."""

    name: str | None
    version: int
    serial: int
    weights: Any = None  # what the fill callback copies into a slot

    @property
    def key(self) -> str:
        """The name of these weights for the prefix cache (unique per publish)."""
        return f"{'' if self.name is None else self.name}#{self.serial}"


class SlotTable:
    """The slot bookkeeping of the module docstring over the slot names ``slots`` (``K + 1`` of them).

    ``fill(slot, published)`` copies a publish's CPU weights into a slot; it is called without any lock held,
    on the publisher's thread for a publish and on the worker's thread for a refill. ``stats`` counts
    ``refills`` (and their seconds, ``refill_s``), ``publish_copies`` and ``evictions``.
    """

    def __init__(self, slots: list[str], max_adapters: int, fill: Callable[[str, Published], None]) -> None:
        if len(slots) < 2 or not 1 <= max_adapters < len(slots):
            raise ValueError(
                f"need at least 2 slots and 1 <= max_adapters < slots, got {slots}, {max_adapters}"
            )
        self.slots = list(slots)
        self.max_adapters = max_adapters
        self._fill = fill
        self._cond = threading.Condition()
        self._latest: dict[str | None, Published] = {}
        self._resident: OrderedDict[str | None, str] = (
            OrderedDict()
        )  # name -> slot, least recently used first
        self._content: dict[str, Published | None] = dict.fromkeys(self.slots)
        self._pins = dict.fromkeys(self.slots, 0)
        self._reserved: set[str] = set()
        self._serial = 0
        self.stats = {"refills": 0, "refill_s": 0.0, "publish_copies": 0, "evictions": 0}

    # ------------------------------------------------------------------ queries
    def version(self, name: str | None) -> int:
        """The version of ``name``'s latest publish (0 before its first)."""
        with self._cond:
            published = self._latest.get(name)
            return 0 if published is None else published.version

    def latest_keys(self) -> set[str]:
        """The ``key`` of every name's latest publish (the weights still served to someone)."""
        with self._cond:
            return {published.key for published in self._latest.values()}

    def copy_bytes(self) -> tuple[int, int]:
        """The adapters with a publish, and the bytes of their CPU copies (tensors of the latest publish each)."""
        with self._cond:
            latest = list(self._latest.values())
        total = sum(
            t.numel() * t.element_size()
            for p in latest
            if isinstance(p.weights, dict)
            for t in p.weights.values()
            if hasattr(t, "element_size")
        )
        return len(latest), total

    def resident(self) -> list[str | None]:
        """The resident names, least recently used first."""
        with self._cond:
            return list(self._resident)

    def key_of(self, selected: str) -> str:
        """The key of the weights ``selected`` (a slot, or ``BASE``) holds; stable while it is pinned."""
        if selected == BASE:
            return BASE
        with self._cond:
            content = self._content[selected]
            return f"{selected}#empty" if content is None else content.key

    # ------------------------------------------------------------------ work (the worker thread)
    def pin(self, weights: str, name: str | None, spare: int | None = None) -> tuple[str, int] | None:
        """``(selected, version)`` for new work on ``weights`` of ``name``: its slot pinned (refilled first
        when the name is not resident), or ``BASE`` with the name's version (``base`` weights, or no publish).

        ``spare`` (a further adapter of a mixed batch, module docstring): never wait, and pin only while
        ``spare`` other slots stay neither pinned nor reserved; ``None`` when refused."""
        if spare is not None and (isinstance(spare, bool) or not isinstance(spare, int) or spare < 0):
            raise ValueError(f"spare must be None or an integer >= 0, got {spare!r}")
        with self._cond:
            published = self._latest.get(name)
            if weights != "policy" or published is None:
                return BASE, 0 if published is None else published.version
            slot = self._resident.get(name)
            if slot is not None:
                if spare is not None and not self._pins[slot] and self._usable(slot) < spare:
                    return None
                self._resident.move_to_end(name)
                self._pins[slot] += 1
                return slot, self._content[slot].version  # type: ignore[union-attr]
            if spare is None:
                slot = self._reserve(name, wait_s=REFILL_WAIT_S)
            else:
                slot = self._free_slot(name)
                if slot is None or self._usable(slot) < spare:
                    return None
                self._take(slot)
            self._pins[slot] += 1
        started = time.perf_counter()
        try:
            self._fill(slot, published)
        except BaseException:
            self._release(slot, None, unpin=True)
            raise
        with self._cond:
            self.stats["refills"] += 1
            self.stats["refill_s"] += time.perf_counter() - started
            self._reserved.discard(slot)
            self._content[slot] = published
            if self._latest.get(name) is published and name not in self._resident:
                self._map(name, slot)
            self._cond.notify_all()
        return slot, published.version

    def unpin(self, selected: str) -> None:
        if selected != BASE:
            with self._cond:
                self._pins[selected] -= 1
                self._cond.notify_all()

    # ------------------------------------------------------------------ publishing (a caller's thread)
    def publish(self, name: str | None, weights: Any, version: int) -> None:
        """Make ``weights`` ``name``'s policy at ``version`` (the module docstring's rule). The caller runs one
        publish at a time."""
        with self._cond:
            self._serial += 1
            published = Published(name, int(version), self._serial, weights)
            while True:
                if name not in self._resident:
                    self._latest[name] = published
                    return
                slot = self._free_slot(name)
                if slot is not None:
                    break
                self._cond.wait()
            self._take(slot)
        try:
            self._fill(slot, published)
        except BaseException:
            self._release(slot, None)
            raise
        with self._cond:
            self.stats["publish_copies"] += 1
            self._reserved.discard(slot)
            self._content[slot] = published
            self._latest[name] = published
            self._resident.pop(name, None)
            self._map(name, slot)
            self._cond.notify_all()

    # ------------------------------------------------------------------ internals (under _cond)
    def _free_slot(self, name: str | None) -> str | None:
        """A slot a copy for ``name`` may overwrite (module docstring), or None."""
        mapped = {slot: owner for owner, slot in self._resident.items()}
        usable = [s for s in self.slots if not self._pins[s] and s not in self._reserved]
        for s in usable:
            if self._content[s] is None and s not in mapped:
                return s
        for s in usable:
            if s not in mapped:
                return s
        for owner, s in self._resident.items():  # least recently used first
            if owner != name and s in usable:
                return s
        return None

    def _usable(self, besides: str) -> int:
        """How many slots other than ``besides`` are neither pinned nor reserved."""
        return sum(1 for s in self.slots if s != besides and not self._pins[s] and s not in self._reserved)

    def _reserve(self, name: str | None, wait_s: float) -> str:
        """A free slot for a refill of ``name``, reserved; waits only while a publisher's copy holds one."""
        deadline = time.monotonic() + wait_s
        while True:
            slot = self._free_slot(name)
            if slot is not None:
                self._take(slot)
                return slot
            left = deadline - time.monotonic()
            if not self._reserved or left <= 0:
                raise RuntimeError(
                    f"no adapter slot is free for {name!r}: all {len(self.slots)} are pinned by running work "
                    "or being written; raise max_adapters"
                )
            self._cond.wait(left)

    def _take(self, slot: str) -> None:
        """Reserve ``slot`` for a copy: whoever was mapped to it is evicted."""
        for owner, s in list(self._resident.items()):
            if s == slot:
                del self._resident[owner]
                self.stats["evictions"] += 1
        self._reserved.add(slot)
        self._content[slot] = None

    def _release(self, slot: str, content: Published | None, unpin: bool = False) -> None:
        with self._cond:
            self._reserved.discard(slot)
            self._content[slot] = content
            if unpin:
                self._pins[slot] -= 1
            self._cond.notify_all()

    def _map(self, name: str | None, slot: str) -> None:
        """Make ``slot`` ``name``'s (most recently used); beyond ``max_adapters`` resident names, the least
        recently used other one loses its place (its slot stays intact while pinned)."""
        self._resident[name] = slot
        self._resident.move_to_end(name)
        while len(self._resident) > self.max_adapters:
            oldest = next(iter(self._resident))
            del self._resident[oldest]
            self.stats["evictions"] += 1
