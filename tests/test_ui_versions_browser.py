"""The learning panel's version controls in a real headless browser (chromium + Selenium, as
``tests/test_ui_browser.py``): the version list, "Did it learn for me?", a rollback and the pause switch, on
the live tiny stack (``recipes/tiny_offline.yaml``, trainer in a thread). Screenshots:
``tests/artifacts/ui_versions_compare.png``, ``ui_versions_rollback.png`` and ``ui_versions_paused.png``.
"""

from __future__ import annotations

import os

import pytest

from tests.helpers import wait_until
from tests.test_ui_browser import ARTIFACTS, CHROMEDRIVER, CHROMIUM, driver  # noqa: F401 (the fixture)
from tests.test_versions import LiveRun

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (os.path.exists(CHROMEDRIVER) and os.path.exists(CHROMIUM)),
        reason="chromium + chromium-driver not installed (run `make browser`)",
    ),
]


def test_rollback_and_pause_from_the_panel(tmp_path, driver):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    run = LiveRun(tmp_path / "run", "--max_steps", "4")
    run.train_until(2, seed=1)
    wait = WebDriverWait(driver, 60)
    text = lambda element_id: driver.find_element(By.ID, element_id).text  # noqa: E731
    driver.get(run.url + "/")

    wait.until(lambda d: "v2" in text("versions") and "serving" in text("versions"))
    assert "v0: initial" in text("versions") and "v1" in text("versions")
    # A prompt of this conversation, then "Did it learn for me?" replays it through base and adapter.
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#msg textarea")).send_keys("tell me about tea")
    driver.find_element(By.ID, "send").click()
    wait.until(lambda d: "recorded as turn" in text("notice"))
    driver.find_element(By.ID, "did-it-learn").click()
    wait.until(lambda d: "Base model" in text("comparison") and "Current adapter (v2)" in text("comparison"))
    assert "tell me about tea" in text("comparison")
    driver.execute_script("document.getElementById('comparison').scrollIntoView({block: 'center'})")
    ARTIFACTS.mkdir(exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / "ui_versions_compare.png"))

    # Roll back to v1 from the dropdown: served as v3, listed as v3: rollback to v1.
    choice = driver.find_element(By.CSS_SELECTOR, "#rollback-version input")
    choice.click()
    choice.send_keys("v1:")
    choice.send_keys(Keys.ENTER)
    driver.find_element(By.ID, "rollback").click()
    wait.until(lambda d: "Rolled back to v1" in text("versions-notice"))
    assert run.version == 3 and "serve as v3" in text("versions-notice")
    wait.until(lambda d: "v3: rollback to v1" in text("versions"))
    # the panel marks the undone update, and the next rollback is offered one update back (v0, not the undone v2)
    wait.until(lambda d: "v3 serves v1's weights again" in text("learning-status"))
    assert "1 of them undone by a rollback" in text("learning-status")
    choice = driver.find_element(By.CSS_SELECTOR, "#rollback-version input")
    wait.until(lambda d: choice.get_attribute("value") == "v0: initial")
    driver.execute_script("document.getElementById('reward-chart').scrollIntoView({block: 'start'})")
    driver.save_screenshot(str(ARTIFACTS / "ui_versions_rollback.png"))

    # Pause: samples queue, no update; the chat still answers; then resume and the update runs.
    driver.find_element(By.CSS_SELECTOR, "#pause-learning input").click()
    wait.until(lambda d: "Learning paused" in text("versions-notice"))
    assert run.runtime.user.store.versions.learning_paused()
    run.add_samples(2, seed=2)
    learning = run.runtime.user.learning
    wait_until(
        lambda: learning.trainer_state == "paused" and run.runtime.user.store.queue.count_waiting() == 2,
        300,
        "the pause",
    )
    assert run.version == 3
    wait.until(lambda d: "paused" in text("versions") and "2 judged samples queued" in text("versions"))
    box = driver.find_element(By.CSS_SELECTOR, "#msg textarea")
    box.send_keys("still learning?")
    driver.find_element(By.ID, "send").click()
    wait.until(lambda d: "recorded as turn" in text("notice") and "policy v3" in text("notice"))
    driver.save_screenshot(str(ARTIFACTS / "ui_versions_paused.png"))
    driver.find_element(By.CSS_SELECTOR, "#pause-learning input").click()
    wait.until(lambda d: "Learning resumed" in text("versions-notice"))
    run.join()  # the update after resuming is the run's last (max_steps 4)
    assert run.version == 4 and not run.runtime.user.store.versions.learning_paused()
