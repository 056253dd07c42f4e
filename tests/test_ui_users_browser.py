"""The UI of a server with several users, in a real headless browser (chromium + Selenium, as
``tests/test_ui_browser.py``) and without one.

Two users, alice and bob, share one tiny HF engine, each through their ``AdapterView``, with their own store,
collector and status (``serving.app.create_tenants_app``). The page is behind Gradio's login (the user's name,
their API key as the password): a wrong password is refused; alice chats and 👍s an answer, which lands in
her store only; bob, logged in from a second browser at the same time, sees none of alice's conversation, and
his learning panel shows his own hints and feedback. Without a browser: the login refuses bad credentials
over HTTP, and each handler acts for the user its request names (pause, privacy, refusing a request without a
logged-in user). Screenshot: ``tests/artifacts/ui_users_bob.png``.

Each user is served through their ``AdapterView`` of one HF engine (no adapter is published here: both are
served the base weights); the tests check which user's service, store and collector the UI reaches.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from types import SimpleNamespace

import httpx
import pytest

from tests._server_helpers import turns
from tests.test_ui_browser import ARTIFACTS, CHROME_FLAGS, CHROMEDRIVER, CHROMIUM

KEYS = {"alice": "alice-key-1", "bob": "bob-key-2"}
ENVIRON = {"ALICE_KEY": KEYS["alice"], "BOB_KEY": KEYS["bob"]}
HAS_BROWSER = os.path.exists(CHROMEDRIVER) and os.path.exists(CHROMIUM)


class PausableLearning:
    """A ``LearningControl`` with no versions yet whose pause switch is all it does."""

    paused, trainer_state, serving_version = False, "learning", 0

    def versions(self) -> list:
        return []

    def set_paused(self, paused: bool) -> None:
        self.paused = paused


@pytest.fixture(scope="module")
def hf_engine(tiny_model_dir):
    from openclaw_trl.engines.hf import HFEngine

    engine = HFEngine(tiny_model_dir)
    yield engine
    engine.close()


@contextlib.contextmanager
def users_server(engine, root, learning=None):
    """alice and bob on one server (``create_tenants_app``, the UI on): yields (url, {name: store}, app)."""
    from openclaw_trl.engines.views import AdapterView
    from openclaw_trl.serving.app import ServerThread, UserParts, create_tenants_app
    from openclaw_trl.serving.settings import ServerSettings
    from openclaw_trl.sessions import TurnCollector
    from openclaw_trl.store import Store
    from openclaw_trl.users import UserKeys, UserSpec

    stores, parts = {}, []
    for name in KEYS:
        (root / name).mkdir(parents=True)
        stores[name] = store = Store(root / name / "store.db")
        status = lambda name=name: {"batch_size": 4, "last_hints": [f"the hint {name} taught"]}  # noqa: E731
        parts.append(
            UserParts(
                name,
                AdapterView(engine, name),
                TurnCollector(store),
                store,
                status=status,
                learning=(learning or {}).get(name),
            )
        )
    keys = UserKeys((UserSpec("alice", "ALICE_KEY"), UserSpec("bob", "BOB_KEY")), environ=ENVIRON)
    app = create_tenants_app(parts, ServerSettings(ui=True, default_max_tokens=8), keys)
    server = ServerThread(app).start()
    try:
        yield server.url, stores, app
    finally:
        server.stop()
        for store in stores.values():
            store.close()


def test_the_users_login_refuses_bad_credentials(hf_engine, tmp_path):
    with users_server(hf_engine, tmp_path) as (url, _stores, _app):
        assert httpx.get(f"{url}/config").status_code == 401  # the page needs a login
        refused = [
            ("alice", "nope"),
            ("alice", KEYS["bob"]),
            ("mallory", KEYS["alice"]),
            ("", ""),
            ("bob", ""),
        ]
        for name, password in refused:
            with httpx.Client(base_url=url) as browser:
                login = browser.post("/login", data={"username": name, "password": password})
                assert login.status_code in (400, 422), (name, password)  # 422: an empty form field
                assert browser.get("/config").status_code == 401
        for name, key in KEYS.items():
            with httpx.Client(base_url=url) as browser:
                assert browser.post("/login", data={"username": name, "password": key}).status_code == 200
                assert browser.get("/config").status_code == 200


def test_each_handler_acts_for_the_logged_in_user(hf_engine, tmp_path):
    """The handlers without a browser: a request names its user (``request.username``), whose collector and
    learning control the event reaches; a request without a known user is refused."""
    import gradio as gr

    from openclaw_trl.serving.ui.blocks import UiHandlers
    from openclaw_trl.serving.ui.chat import new_conversation
    from openclaw_trl.serving.ui.guide import guide_for
    from openclaw_trl.serving.ui.tenants import NOT_LOGGED_IN, TenantLookup
    from openclaw_trl.serving.ui.versions import VersionControls

    learning = {name: PausableLearning() for name in KEYS}
    with users_server(hf_engine, tmp_path, learning=learning) as (_url, stores, app):
        lookup = TenantLookup(app.state.tenants)
        on = UiHandlers.per_request(lookup, guide_for(None))
        versions = VersionControls(lookup)
        bob, alice = SimpleNamespace(username="bob"), SimpleNamespace(username="alice")
        assert "paused" in versions.on_pause(True, bob)
        assert learning["bob"].paused and not learning["alice"].paused
        assert "paused" in versions.refresh(None, bob)[0] and "paused" not in versions.refresh(None, alice)[0]
        conv = new_conversation()
        on.on_private(True, conv, alice)
        session = stores["alice"].conversations.find_open_session(conv["session_id"])
        assert session is not None and session.private
        assert stores["bob"].conversations.find_open_session(conv["session_id"]) is None
        assert "the hint bob taught" in on.refresh(bob)[1] and "alice" not in on.refresh(bob)[1]
        for nobody in (None, SimpleNamespace(username=None), SimpleNamespace(username="mallory")):
            with pytest.raises(gr.Error, match="Log in"):
                on.refresh(nobody)
            with pytest.raises(gr.Error, match="Log in"):
                versions.on_pause(True, nobody)
        assert NOT_LOGGED_IN.startswith("Log in")
    with pytest.raises(ValueError, match="either its only user"):
        TenantLookup({None: app.state.tenants["alice"], "bob": app.state.tenants["bob"]})
    with pytest.raises(ValueError, match="at least one"):
        TenantLookup({})


def _chrome(profile):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    return driver


@pytest.fixture
def browsers(tmp_path):
    """Two separate browsers (their own profiles and cookies): alice's and bob's."""
    started = []
    try:
        for name in KEYS:
            started.append(_chrome(tmp_path / f"chromium-{name}"))
        yield dict(zip(KEYS, started, strict=True))
    finally:
        for driver in started:
            driver.quit()
        for name in KEYS:
            shutil.rmtree(tmp_path / f"chromium-{name}", ignore_errors=True)


def _log_in(driver, url: str, name: str, password: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url + "/")
    wait = WebDriverWait(driver, 60)
    password_box = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "input[type='password']"))
    driver.find_element(By.CSS_SELECTOR, "input[data-testid='textbox']").send_keys(name)
    password_box.send_keys(password)
    driver.find_element(By.XPATH, "//button[contains(., 'Login')]").click()


@pytest.mark.slow
@pytest.mark.skipif(not HAS_BROWSER, reason="chromium + chromium-driver not installed (run `make browser`)")
def test_two_users_each_see_only_their_own_ui(hf_engine, tmp_path, browsers):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with users_server(hf_engine, tmp_path / "run") as (url, stores, _app):
        alice, bob = browsers["alice"], browsers["bob"]
        text = lambda d, element_id: d.find_element(By.ID, element_id).text  # noqa: E731

        # a wrong password is refused: the login form stays, the chat never shows
        _log_in(alice, url, "alice", KEYS["bob"])
        WebDriverWait(alice, 30).until(
            lambda d: "incorrect" in d.find_element(By.TAG_NAME, "body").text.lower()
        )
        assert not alice.find_elements(By.ID, "chat")

        _log_in(alice, url, "alice", KEYS["alice"])
        wait = WebDriverWait(alice, 60)
        box = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#msg textarea"))
        wait.until(lambda d: "the hint alice taught" in text(d, "hints"))  # her own panel
        wait.until(lambda d: "Signed in as alice" in text(d, "signed-in"))
        box.send_keys("hello from alice")
        alice.find_element(By.ID, "send").click()
        wait.until(lambda d: "recorded as turn" in text(d, "notice"))
        turn_id = int(text(alice, "notice").split("turn ")[1].split(" ")[0])
        alice.find_element(By.CSS_SELECTOR, "#chat button[aria-label='Like']").click()
        wait.until(lambda d: "👍 recorded for turn" in text(d, "notice"))
        wait.until(lambda d: "1 👍" in text(d, "learning-status"))

        [turn] = turns(stores["alice"])
        assert turn.id == turn_id and turn.prompt_messages[-1]["content"] == "hello from alice"
        assert [(f.turn_id, f.rating) for f in stores["alice"].queries.iter_feedback()] == [(turn_id, 1)]
        assert turns(stores["bob"]) == [] and list(stores["bob"].queries.iter_feedback()) == []

        # bob, logged in at the same time, sees none of it: his chat is empty, his panel is his
        _log_in(bob, url, "bob", KEYS["bob"])
        bob_wait = WebDriverWait(bob, 60)
        bob_box = bob_wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#msg textarea"))
        bob_wait.until(lambda d: "the hint bob taught" in text(d, "hints"))
        bob_wait.until(lambda d: "0 👍" in text(d, "learning-status"))
        bob_wait.until(lambda d: "Signed in as bob" in text(d, "signed-in"))
        page = bob.find_element(By.TAG_NAME, "body").text
        assert "hello from alice" not in page and "alice taught" not in page
        bob_box.send_keys("hello from bob")
        bob.find_element(By.ID, "send").click()
        bob_wait.until(lambda d: "recorded as turn" in text(d, "notice"))
        assert "hello from alice" not in text(bob, "chat")
        ARTIFACTS.mkdir(exist_ok=True)
        bob.save_screenshot(str(ARTIFACTS / "ui_users_bob.png"))

        [bob_turn] = turns(stores["bob"])
        assert bob_turn.prompt_messages[-1]["content"] == "hello from bob"
        assert len(turns(stores["alice"])) == 1  # alice's store got none of bob's
        assert "hello from bob" not in text(alice, "chat") and "1 👍" in text(alice, "learning-status")
