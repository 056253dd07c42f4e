"""Whose UI an event acts for: ``TenantViews`` is one user's side of the UI, ``TenantLookup`` finds it per event.

A server with one user has one tenant (``{None: tenant}``): every visitor of the page is that user (behind the
server's API key when it has one). A server with several users has one tenant per user name, and the page is
behind Gradio's login (the user's name and API key): every event handler of the UI declares a ``gr.Request``,
whose ``username`` is the logged-in name, and acts on that user's chat service (their engine view and store),
collector (👍/👎, corrections, session switches), learning control (versions, rollback, pause) and learning
panel only. The conversation itself is Gradio state, which lives per browser tab, so no user can reach another
user's conversations, turns, versions or status through the UI.
"""

from __future__ import annotations

from collections.abc import Mapping

import gradio as gr

from openclaw_trl.serving.http.auth import Tenant
from openclaw_trl.serving.ui.changed import WhatChanged
from openclaw_trl.serving.ui.panel import PanelViews

NOT_LOGGED_IN = (
    "Log in as one of this server's users first (your user name, and your API key as the password)."
)


def correction_window_s(service) -> float | None:
    """How long the server keeps a rating from training while a correction may follow (the session config's
    ``correction_window_s``); ``None`` when it keeps none."""
    for config in (getattr(service.collector, "config", None), service.settings):
        window = getattr(config, "correction_window_s", None)
        if isinstance(window, int | float) and window > 0:
            return float(window)
    return None


class TenantViews:
    """One user's side of the UI: their chat service (``service``: engine view, store, settings, status), their
    collector (``sessions``: per-turn signals and session switches), their learning control (``learning``, None
    when nothing trains), the served model name, the correction window, and the panel's views of their store
    (``panel``; ``changed``: the toy model's "What changed", None for other models)."""

    def __init__(self, tenant: Tenant, toy: bool = False) -> None:
        self.name = tenant.name
        self.service, self.sessions, self.learning = tenant.service, tenant.collector, tenant.learning
        self.model = self.service.settings.model_names[0]
        self.window_s = correction_window_s(self.service)
        self.panel = PanelViews(self.service.store, self.learning)
        self.changed = WhatChanged(self.service) if toy else None


class TenantLookup:
    """``lookup(request)``: the ``TenantViews`` an event acts for.

    ``tenants``: ``{None: tenant}`` (one user: every request is theirs, whatever name a login gave) or
    ``{name: tenant}`` (several users: the one ``request.username`` names; an event without a logged-in user,
    or with a name that is not one of them, is refused with ``NOT_LOGGED_IN``)."""

    def __init__(self, tenants: Mapping[str | None, Tenant], toy: bool = False) -> None:
        if not tenants:
            raise ValueError("the UI needs at least one tenant")
        names = list(tenants)
        if None in names and len(names) > 1:
            raise ValueError("a UI serves either its only user (None) or named users, not both")
        self.single = names == [None]
        self._views = {name: TenantViews(tenant, toy) for name, tenant in tenants.items()}

    @property
    def only(self) -> TenantViews | None:
        """The only user's views (one user), else None: before a login, no user is known."""
        return self._views[None] if self.single else None

    @property
    def first(self) -> TenantViews:
        """Any user's views: what every user shares (the model, the server's settings) reads from it."""
        return next(iter(self._views.values()))

    def __call__(self, request: gr.Request | None) -> TenantViews:
        if self.single:
            return self._views[None]
        name = getattr(request, "username", None)
        views = self._views.get(name) if isinstance(name, str) else None
        if views is None:
            raise gr.Error(NOT_LOGGED_IN)
        return views


def signed_in_line(request: gr.Request) -> str:
    """The line that names the logged-in user (a server with several users; ``request``: Gradio's)."""
    return f"Signed in as **{request.username}**: what you teach here shapes your own adapter only."
