"""The offline toy demo as a newcomer meets it, in a real headless browser (chromium + Selenium, as
``tests/test_ui_browser.py``): the app starts from a fresh user cache (``OPENCLAW_TRL_CACHE``), the page
explains itself (which model, what to type, clickable examples), a clicked example is answered, a 👎 offers
the correction box, the correction is the signal learned from that turn, and a 👍 on another answer
completes the update the panel then describes in words ("What changed" included).

Screenshots: ``demo_first_screen.png`` (the page as it opens) and ``demo_panel_after_learning.png`` (the
learning panel after the update). Every run writes them to ``tests/artifacts/latest/`` (ignored by git; the
answers are random, so they differ from run to run); the copies in ``tests/artifacts/`` are committed (the
README shows one), written by a run when missing: delete them to refresh them.
"""

from __future__ import annotations

import os
import shutil
import threading

import pytest

from tests.test_ui_browser import ARTIFACTS, CHROMEDRIVER, CHROMIUM, driver  # noqa: F401 (the fixture)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (os.path.exists(CHROMEDRIVER) and os.path.exists(CHROMIUM)),
        reason="chromium + chromium-driver not installed (run `make browser`)",
    ),
]

CORRECTION = "Please answer as a short bulleted list, each line starting with '- '."
DEADLINE_S = 120.0


def screenshot(browser, name: str) -> None:
    """Save the page to ``tests/artifacts/latest/name``, and to ``tests/artifacts/name`` when that is missing."""
    latest = ARTIFACTS / "latest" / name
    latest.parent.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(latest))
    if not (ARTIFACTS / name).exists():
        shutil.copyfile(latest, ARTIFACTS / name)


@pytest.fixture
def demo_cache(tmp_path, monkeypatch):
    """The user cache the demo starts from (``OPENCLAW_TRL_CACHE``): a new, empty directory, as on the very
    first start (the toy model ships with the package)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("OPENCLAW_TRL_CACHE", str(cache))
    return cache


def test_demo_explains_itself_and_learns_the_correction_after_a_dislike(demo_cache, tmp_path, driver):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from openclaw_trl.runtime import build_runtime, load_recipe, start_server

    argv = ["--config", "recipes/toy_offline.yaml", "--output_dir", str(tmp_path / "run"), "--max_steps", "1"]
    runtime = build_runtime(*load_recipe(argv))
    trainer = threading.Thread(target=runtime.user.trainer.train, daemon=True)
    store = runtime.user.store
    try:
        runtime.user.scorer.start()
        server = start_server(runtime, port=0, ui=True)
        trainer.start()
        wait = WebDriverWait(driver, DEADLINE_S)
        text = lambda element_id: driver.find_element(By.ID, element_id).text  # noqa: E731
        driver.get(server.url + "/")

        # The first screen: which model, what it knows, what to type; clickable examples.
        examples = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chat button.example"))
        assert [e.text for e in examples][:2] == ["Tell me about apples.", "Tell me about music."]
        wait.until(lambda d: "Serving v0" in text("learning-status"))
        assert driver.title == "Teach the toy model your favourite answer style"
        header = text("header")
        assert "Tell me about <topic>." in header and "apples" in header and "bulleted" in header
        charts = driver.find_elements(By.CSS_SELECTOR, "#reward-chart, #hint-chart")
        assert not any(chart.is_displayed() for chart in charts)  # no chart before the first update
        labels = driver.execute_script(
            "return Array.from(document.querySelectorAll('[aria-label]')).map(e => e.getAttribute('aria-label'))"
        )
        assert not [label for label in labels if "<" in label], labels
        screenshot(driver, "demo_first_screen.png")

        # Click an example: it is sent and answered.
        examples[0].click()
        wait.until(lambda d: "recorded as turn" in text("notice"))
        disliked = int(text("notice").split("turn ")[1].split(" ")[0])
        assert (
            store.conversations.get_turn(disliked).prompt_messages[-1]["content"] == "Tell me about apples."
        )

        # 👎: the correction box is offered right there (a prompt line, the box focused); the correction
        # sent then replaces the 👎 as the turn's signal.
        driver.find_element(By.CSS_SELECTOR, "#chat button[aria-label='Dislike']").click()
        wait.until(lambda d: "What should it have said?" in text("correction-prompt"))
        assert f"on turn {disliked}" in text("correction-prompt")
        if getattr(
            runtime.user.collector.config, "correction_window_s", 0
        ):  # the server holds the 👎 that long
            assert "s (and before your next message) replaces the 👎" in text("correction-prompt")
            wait.until(lambda d: "Waiting for a correction: 1 rating" in text("learning-status"))
        box = driver.find_element(By.CSS_SELECTOR, "#correction textarea")
        wait.until(lambda d: d.switch_to.active_element == box)
        box.send_keys(CORRECTION)
        driver.find_element(By.ID, "send-correction").click()
        wait.until(lambda d: f"Correction recorded for turn {disliked}: it is what" in text("notice"))
        assert not text("correction-prompt")
        state = store.conversations.get_turn(disliked).next_state
        assert (state["rating"], state["text"]) == (-1, CORRECTION)

        # A new conversation, another example, 👍: the second rated answer completes the update.
        driver.find_element(By.ID, "new-conversation").click()
        wait.until(lambda d: "New conversation" in text("notice"))
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chat button.example"))[1].click()
        wait.until(
            lambda d: "recorded as turn" in text("notice") and f"turn {disliked} " not in text("notice")
        )
        liked = int(text("notice").split("turn ")[1].split(" ")[0])
        driver.find_element(By.CSS_SELECTOR, "#chat button[aria-label='Like']").click()
        wait.until(lambda d: f"👍 recorded for turn {liked}" in text("notice"))
        assert not text("correction-prompt")  # a 👍 offers no correction

        trainer.join(timeout=DEADLINE_S)
        assert not trainer.is_alive() and runtime.user.trainer.state.global_step == 1
        trained = {s.turn_id: s for s in store.queries.iter_samples() if s.consumed_step == 1}
        assert set(trained) == {disliked, liked}
        assert (
            trained[disliked].hint == CORRECTION and trained[disliked].reward < 0
        )  # the correction, learned
        kinds = [(f.rating, f.kind) for f in store.queries.iter_feedback() if f.turn_id == disliked]
        assert kinds == [(-1, "rating"), (-1, "correction")]

        # The panel in words, the reward chart shown, and what changed in the answers to the prompts asked.
        wait.until(lambda d: "Serving v1 after 1 update" in text("learning-status"))
        summary = text("learning-status")
        assert "Learned from 2 answers" in summary and "1 👍, 1 👎, 1 correction" in summary
        wait.until(lambda d: d.find_element(By.ID, "reward-chart").is_displayed())
        changed = wait.until(lambda d: "of 10 samples" in text("what-changed") and text("what-changed"))
        assert "Tell me about music." in changed and "Tell me about apples." in changed
        assert "before learning" in changed
        # the rollback control offers the version before (one update back), pre-filled
        choice = driver.find_element(By.CSS_SELECTOR, "#rollback-version input")
        wait.until(lambda d: choice.get_attribute("value") == "v0: initial")
        assert "| state" in driver.execute_script("return document.getElementById('versions').innerText") or (
            "state" in text("versions")
        )
        driver.set_window_size(1400, 1700)  # the whole panel in one picture
        driver.execute_script("window.scrollTo(0, 0)")
        screenshot(driver, "demo_panel_after_learning.png")
    finally:
        runtime.close()
        trainer.join(timeout=60)
