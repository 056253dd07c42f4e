"""The chatbot's own events in a real headless browser (chromium + Selenium, as ``tests/test_ui_browser.py``):
👍/👎 on an earlier answer, editing an answer as its correction, retry and undo; each checks the store
afterwards (the right turn got the right signal, undo left no trainable turn). Screenshots go to
``tests/artifacts/ui_like_edit.png``, ``ui_retry.png`` and ``ui_undo.png`` (git-ignored)."""

from __future__ import annotations

import re

import pytest

from openclaw_trl.store import WITHDRAWN
from tests._server_helpers import ScriptedEngine, running_stack
from tests.test_ui_browser import ARTIFACTS, pytestmark  # noqa: F401  (skipped without chromium)
from tests.test_ui_browser import driver as driver  # noqa: F401  (the browser fixture)

THOUGHT = "<think>\nThe user greets me; greet back.\n</think>\n\n"


@pytest.fixture(scope="module")
def hf_engine(tiny_model_dir):
    from openclaw_trl.engines.hf import HFEngine

    engine = HFEngine(tiny_model_dir)
    yield engine
    engine.close()


class Page:
    """The chat page of one running stack: send messages, find an answer's buttons, read the notice."""

    def __init__(self, driver, stack):
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver, self.stack = driver, stack
        self.wait = WebDriverWait(driver, 60)
        self.last_turn = 0  # turn ids grow in a store
        driver.get(stack.url + "/")
        self.wait.until(lambda d: d.find_element("css selector", "#msg textarea"))

    def notice(self) -> str:
        return self.driver.find_element("id", "notice").text

    def until_notice(self, text: str) -> str:
        self.wait.until(lambda d: text in self.notice())
        return self.notice()

    def recorded_turn(self) -> int | None:
        """The newest turn the notice says was recorded (None before the next one is)."""
        found = re.search(r"recorded as turn (\d+)", self.notice())
        turn = int(found.group(1)) if found else None
        return turn if turn is not None and turn > self.last_turn else None

    def until_recorded(self) -> int:
        self.last_turn = self.wait.until(lambda d: self.recorded_turn())
        return self.last_turn

    def send(self, text: str) -> int:
        """Send a message; returns the turn id of the answer once it is recorded and shown."""
        self.driver.find_element("css selector", "#msg textarea").send_keys(text)
        self.driver.find_element("id", "send").click()
        return self.until_recorded()

    def answer_row(self, text: str):
        xpath = f"//div[@id='chat']//div[contains(@class, 'bot-row')][.//p[normalize-space()='{text}']]"
        return self.wait.until(lambda d: d.find_element("xpath", xpath))

    def button(self, answer, label: str):
        """The ``label`` button (Like, Dislike, Edit, Retry, Undo, Submit) under an answer (its text or row)."""
        row = self.answer_row(answer) if isinstance(answer, str) else answer
        panel = row.find_element("xpath", "following-sibling::div[contains(@class, 'message-buttons')][1]")
        return panel.find_element("css selector", f"button[aria-label='{label}']")

    def chat_text(self) -> str:
        return self.driver.find_element("id", "chat").text

    def shoot(self, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.driver.save_screenshot(str(ARTIFACTS / name))


def scripted(hf_engine, *replies):
    texts = iter(replies)
    return ScriptedEngine(hf_engine, lambda _ids: next(texts, None))


def test_like_an_earlier_answer_and_edit_one_as_its_correction(hf_engine, tmp_path, driver):
    engine = scripted(hf_engine, THOUGHT + "Hello there.", "Paris is in Spain.", "Anything else?", "Fine.")
    with running_stack(engine, tmp_path / "store.db", ui=True, default_max_tokens=12) as stack:
        page = Page(driver, stack)
        t1, t2, t3 = page.send("hi"), page.send("Where is Paris?"), page.send("thanks")
        assert "policy v0" in page.chat_text()  # the version line under each answer
        # 👎 on the first answer, two answers up
        page.button("Hello there.", "Dislike").click()
        page.until_notice(f"👎 recorded for turn {t1}")
        first = stack.store.conversations.get_turn(t1)
        assert (first.status, first.next_state_source, first.next_state["rating"]) == (
            "ready",
            "feedback",
            -1,
        )
        assert (
            stack.store.conversations.get_turn(t2).next_state["content"] == "thanks"
        )  # the others are untouched
        assert stack.store.conversations.get_turn(t3).status == "awaiting"
        # edit the second answer: the edited text is that turn's correction
        row = page.answer_row("Paris is in Spain.")
        page.button(row, "Edit").click()
        box = row.find_element("css selector", "textarea")  # the answer's (the version line has its own)
        box.clear()
        box.send_keys("Paris is in France.")
        page.button(row, "Submit").click()
        page.until_notice(f"Edit recorded as the correction of turn {t2}")
        state = stack.store.conversations.get_turn(t2).next_state
        assert (state["text"], state["kind"], state["rating"]) == ("Paris is in France.", "edit", -1)
        assert "edited: your version is its correction" in page.chat_text()
        page.driver.execute_script("document.querySelector('#chat .bubble-wrap').scrollTop = 0")
        page.shoot("ui_like_edit.png")
        feedback = [(f.turn_id, f.kind, f.attached) for f in stack.store.queries.iter_feedback()]
        assert feedback == [(t1, "rating", True), (t2, "edit", True)]
        # an edit of your own message is put back (it is not a correction of anything)
        page.driver.find_element(
            "xpath",
            "//div[contains(@class, 'user-row')][.//p[normalize-space()='thanks']]"
            "/following-sibling::div[contains(@class, 'message-buttons')][1]//button[@aria-label='Edit']",
        ).click()
        mine = page.driver.find_element("css selector", "#chat .user-row textarea")
        mine.send_keys(" a lot")
        page.driver.find_element("css selector", "#chat button[aria-label='Submit']").click()
        page.until_notice("Only an answer's text can be edited")
        page.wait.until(lambda d: "thanks a lot" not in page.chat_text())
        # the conversation goes on from the model's own answers; the version line is never part of it
        t4 = page.send("bye")
        prompt = stack.store.conversations.get_turn(t4).prompt_messages
        assert [m["content"] for m in prompt if m["role"] == "assistant"] == [
            "Hello there.",
            "Paris is in Spain.",
            "Anything else?",
        ]
        assert not any("policy v" in str(m) for m in prompt)
        assert page.button("Hello there.", "Disliked")  # the 👎 still shows after the chat changed
        assert stack.store.conversations.get_turn(t3).next_state["content"] == "bye"


def test_retry_rejects_the_answer_and_samples_a_new_turn(hf_engine, tmp_path, driver):
    engine = scripted(hf_engine, "Hi!", "It is 5.", "It is 4.", "Good.")
    with running_stack(engine, tmp_path / "store.db", ui=True, default_max_tokens=12) as stack:
        page = Page(driver, stack)
        t1, t2 = page.send("hello"), page.send("What is 2+2?")
        page.button("It is 5.", "Retry").click()
        t3 = page.until_recorded()
        assert f"Turn {t2} rejected" in page.notice()
        page.wait.until(lambda d: "It is 4." in page.chat_text())
        assert "It is 5." not in page.chat_text()
        rejected, new = stack.store.conversations.get_turn(t2), stack.store.conversations.get_turn(t3)
        assert (rejected.status, rejected.next_state["kind"], rejected.next_state["rating"]) == (
            "ready",
            "reject",
            -1,
        )
        assert rejected.next_state["text"] is None
        assert new.prompt_messages == rejected.prompt_messages and new.trainable and new.status == "awaiting"
        page.shoot("ui_retry.png")
        t4 = page.send("right")
        assert (
            stack.store.conversations.get_turn(t3).next_state["content"] == "right"
        )  # the new answer learns as usual
        assert [
            m["content"]
            for m in stack.store.conversations.get_turn(t4).prompt_messages
            if m["role"] == "assistant"
        ] == [
            "Hi!",
            "It is 4.",
        ]
        assert stack.store.conversations.get_turn(t1).next_state["content"] == "What is 2+2?"


def test_undo_withdraws_the_last_exchange(hf_engine, tmp_path, driver):
    engine = scripted(hf_engine, THOUGHT + "Hello!", "Bad answer.", "Better.")
    with running_stack(engine, tmp_path / "store.db", ui=True, default_max_tokens=12) as stack:
        page = Page(driver, stack)
        t1, t2 = page.send("hi"), page.send("tell me a joke")
        page.button("Bad answer.", "Like").click()  # rated, then undone: the rating goes with it
        page.until_notice(f"👍 recorded for turn {t2}")
        page.button("Bad answer.", "Undo").click()
        page.until_notice(f"Turn {t2} withdrawn")
        page.wait.until(lambda d: "Bad answer." not in page.chat_text())
        assert (
            page.driver.find_element("css selector", "#msg textarea").get_attribute("value")
            == "tell me a joke"
        )
        undone = stack.store.conversations.get_turn(t2)
        assert (undone.status, undone.close_reason) == ("closed", WITHDRAWN)
        assert [t.id for t in stack.store.judging.ready_turns(10)] == [
            t1
        ]  # no trainable trace of the undone turn
        assert "Reasoning" in page.chat_text()
        page.shoot("ui_undo.png")
        page.driver.find_element("css selector", "#msg textarea").clear()
        t3 = page.send("tell me a fact")
        assert [m["content"] for m in stack.store.conversations.get_turn(t3).prompt_messages] == [
            "hi",
            "Hello!",
            "tell me a fact",
        ]
        assert stack.store.conversations.get_turn(t2).status == "closed"
        assert [t.id for t in stack.store.judging.ready_turns(10)] == [
            t1
        ]  # still no trace of the undone turn
        # the chat's own 🗑 starts a new conversation, as the button does
        page.driver.find_element("css selector", "#chat button[aria-label='Clear']").click()
        page.until_notice("New conversation")
        assert (
            stack.store.conversations.get_session(stack.store.conversations.get_turn(t3).session_id).ended
            is not None
        )
