"""The Gradio UI in a real headless browser (Debian chromium + chromedriver, driven by Selenium).

Load the page, send a message, see the streamed reply, click 👎, write a correction, and find both in the
store as the turn's next state; the "don't learn" switch and "New conversation" are exercised too. A
screenshot goes to ``tests/artifacts/ui_feedback.png`` (git-ignored). The offline toy demo
(``recipes/toy_offline.yaml``) is driven too: 👍/👎 clicks until its answers are mostly bulleted
(``tests/artifacts/toy_demo_learns.png``). ``make test`` installs the browser
(``make browser``); without it the test is skipped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from tests._server_helpers import ScriptedEngine, running_stack, turns

CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).parent / "artifacts"
SCRIPTED = "<think>\nThe user greets me; greet back and offer help.\n</think>\n\nHello! How can I help?"
CHROME_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (os.path.exists(CHROMEDRIVER) and os.path.exists(CHROMIUM)),
        reason="chromium + chromium-driver not installed (run `make browser`)",
    ),
]


def fake_status():
    """What the trainer's status() looks like after a few updates (the panel must plot it)."""
    return {
        "policy_version": 3,
        "samples_waiting": 2,
        "batch_size": 4,
        "last_metrics": {"loss": 0.0123, "reward_mean": 0.5},
        "history": [
            {"step": 1, "reward_mean": -0.5, "hint_accept_rate": 0.25},
            {"step": 2, "reward_mean": 0.0, "hint_accept_rate": 0.5},
            {"step": 3, "reward_mean": 0.5, "hint_accept_rate": 0.75},
        ],
        "last_hints": ["Answer with the number first, then explain in one sentence."],
    }


@pytest.fixture
def driver(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    drv = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    drv.set_page_load_timeout(60)
    yield drv
    drv.quit()
    shutil.rmtree(tmp_path / "chromium-profile", ignore_errors=True)


def test_chat_dislike_and_correct_in_the_browser(tiny_model_dir, tmp_path, driver):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from openclaw_trl.engines.hf import HFEngine

    hf = HFEngine(tiny_model_dir)
    # the first answer thinks (to show the collapsible reasoning); later ones come from the tiny model
    scripted = iter([SCRIPTED])
    engine = ScriptedEngine(hf, lambda _ids: next(scripted, None))
    try:
        with running_stack(engine, tmp_path / "store.db", ui=True, default_max_tokens=12) as stack:
            stack.app.state.tenants[None].service._status = fake_status
            wait = WebDriverWait(driver, 60)
            notice = lambda: driver.find_element(By.ID, "notice").text  # noqa: E731

            driver.get(stack.url + "/")
            box = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#msg textarea"))
            wait.until(lambda d: "v3" in d.find_element(By.ID, "learning-status").text)  # the live panel
            box.send_keys("hello there")
            driver.find_element(By.ID, "send").click()
            wait.until(lambda d: "recorded as turn" in notice())
            turn_id = int(notice().split("turn ")[1].split(" ")[0])
            wait.until(lambda d: "How can I help?" in d.find_element(By.ID, "chat").text)  # the reply
            assert "Reasoning" in driver.find_element(By.ID, "chat").text  # collapsible reasoning block
            turn = stack.store.conversations.get_turn(turn_id)
            assert turn.prompt_messages[-1]["content"] == "hello there"

            driver.find_element(By.CSS_SELECTOR, "#chat button[aria-label='Dislike']").click()
            wait.until(lambda d: "recorded for turn" in notice())
            correction = driver.find_element(By.CSS_SELECTOR, "#correction textarea")
            correction.send_keys("Say hello back politely.")
            driver.find_element(By.ID, "send-correction").click()
            wait.until(lambda d: "Correction recorded" in notice())
            ARTIFACTS.mkdir(exist_ok=True)
            driver.save_screenshot(str(ARTIFACTS / "ui_feedback.png"))

            feedback = [f for f in stack.store.queries.iter_feedback() if f.turn_id == turn_id]
            assert [(f.rating, f.text) for f in feedback] == [
                (-1, None),
                (-1, "Say hello back politely."),
            ]
            state = stack.store.conversations.get_turn(turn_id).next_state
            assert state["rating"] == -1 and state["text"] == "Say hello back politely."

            # "don't learn from this conversation", then a new conversation starts a new session
            driver.find_element(By.CSS_SELECTOR, "#private input").click()
            wait.until(lambda d: "will not be learned" in notice())
            first_session = stack.store.conversations.get_turn(turn_id).session_id
            assert stack.store.conversations.get_session(first_session).private
            driver.find_element(By.ID, "new-conversation").click()
            wait.until(lambda d: "New conversation" in notice())
            assert stack.store.conversations.get_session(first_session).ended is not None
            box = driver.find_element(By.CSS_SELECTOR, "#msg textarea")
            box.send_keys("second chat")
            driver.find_element(By.ID, "send").click()
            wait.until(lambda d: "recorded as turn" in notice())
            rows = turns(stack.store)
            assert len(rows) == 2 and rows[1].session_id != first_session
            assert not stack.store.conversations.get_session(
                rows[1].session_id
            ).private  # the switch is per conversation
    finally:
        hf.close()


TOY_UPDATES = 8  # the trainer's max_steps: 2 rated answers each (the recipe's batch_size)
TOY_LAST_K = 8  # replies sampled by the final policy that are counted
TOY_MAX_ROUNDS = 40  # the bound on questions (and clicks)


def _well_bulleted(answer: str) -> bool:
    """What a person 👍 in the toy demo: a well-formed answer about apples (one to three of its facts, each a
    bullet line that is a whole sentence: ``toy.world.answer_fidelity``); a degenerate answer that only starts
    with "- " is not one."""
    from openclaw_trl.toy import world

    return answer.lstrip().startswith("- ") and world.answer_fidelity("apples", answer)


def _ask_and_rate(driver, wait, store, bullets) -> tuple[int, bool, bool]:
    """Ask "Tell me about apples." in the UI, 👍 a well-formed bulleted answer, 👎 an answer in another style,
    no rating for broken bullets (the right style, badly written: a 👎 there would teach against the style); returns
    the policy version that answered, whether the answer is in the ``bullets`` style and whether it was
    liked."""
    from selenium.webdriver.common.by import By

    notice = lambda: driver.find_element(By.ID, "notice").text  # noqa: E731
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#msg textarea")).send_keys("Tell me about apples.")
    driver.find_element(By.ID, "send").click()
    wait.until(lambda d: "recorded as turn" in notice())
    turn = store.conversations.get_turn(int(notice().split("turn ")[1].split(" ")[0]))
    answer = turn.response_message["content"]
    chat = driver.find_element(By.ID, "chat")
    shown = re.sub(r"^\s*(-|\d+\.)\s*", "", answer.splitlines()[0])  # Markdown renders the list marker
    wait.until(lambda d: shown in chat.text)  # the answer the user sees
    bulleted, liked = bullets.matches(answer), _well_bulleted(answer)
    if bulleted and not liked:
        # broken bullets: the right style, badly written; a person skips it rather than 👎 the style
        return turn.policy_version, bulleted, liked
    chat.find_element(By.CSS_SELECTOR, f"button[aria-label='{'Like' if liked else 'Dislike'}']").click()
    wait.until(lambda d: f"recorded for turn {turn.id}" in notice())
    return turn.policy_version, bulleted, liked


def test_toy_demo_learns_the_bulleted_style_from_clicks(toy_demo_model, tmp_path, driver):
    """The offline demo in the browser: ask "Tell me about apples.", 👍 the (well-formed) bulleted answers
    and 👎 the others, a new conversation each time; after the trainer's updates most answers are bulleted."""
    import threading

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from openclaw_trl.runtime import build_runtime, load_recipe, start_server
    from openclaw_trl.toy import world
    from openclaw_trl.toy.pretrain import META_FILE

    bullets = next(s for s in world.STYLES if s.name == "bullets")
    argv = ["--config", "recipes/toy_offline.yaml", "--output_dir", str(tmp_path / "run")]
    argv += ["--save_strategy", "no", "--adapter_history", "0", "--max_steps", str(TOY_UPDATES)]
    runtime = build_runtime(*load_recipe(argv))
    trainer = threading.Thread(target=runtime.user.trainer.train, daemon=True)
    try:
        runtime.user.scorer.start()
        server = start_server(runtime, port=0, ui=True)
        trainer.start()
        wait = WebDriverWait(driver, 60)
        driver.get(server.url + "/")
        replies = []  # (policy version that answered, bulleted, liked)
        for _ in range(TOY_MAX_ROUNDS):
            replies.append(_ask_and_rate(driver, wait, runtime.user.store, bullets))
            final = [bulleted for version, bulleted, _ in replies if version == TOY_UPDATES]
            if replies[-1][2] and final:
                ARTIFACTS.mkdir(exist_ok=True)  # a bulleted answer of the final policy, 👍 recorded
                driver.save_screenshot(str(ARTIFACTS / "toy_demo_learns.png"))
            if len(final) >= TOY_LAST_K:
                break
            driver.find_element(By.ID, "new-conversation").click()
            wait.until(lambda d: "New conversation" in d.find_element(By.ID, "notice").text)
        assert len(final) >= TOY_LAST_K, (
            f"{TOY_UPDATES} updates not reached in {len(replies)} clicks: {replies}"
        )
        assert sum(final) >= 6, f"bulleted among the last {TOY_LAST_K} replies: {sum(final)}; all: {replies}"
        base = json.loads((toy_demo_model / META_FILE).read_text())["metrics"]["bare"]["rate"]
        assert base < 0.5  # before any update, bulleted answers are a minority (about 1 in 4)
        assert not trainer.is_alive() and runtime.user.trainer.state.global_step == TOY_UPDATES
    finally:
        runtime.close()
        trainer.join(timeout=60)
