"""The offline toy demo: the cache of toy models pre-trained with other settings than the packaged one,
``openclaw-trl/toy`` in a recipe, and ``app.py`` falling back to the demo when the default model cannot be
fetched (the packaged model itself: ``test_toy_package.py``)."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path

import httpx
import pytest

from openclaw_trl.errors import UserError
from openclaw_trl.toy.world import OFF_TOPIC_ANSWER
from tests.helpers import wait_until

ROOT = Path(__file__).parent.parent

FALLBACK_LINE = (
    "Qwen/Qwen3-0.6B cannot be fetched (offline?): starting the offline toy demo instead "
    "(recipes/toy_offline.yaml)"
)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENCLAW_TRL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_cache_root_follows_the_environment(tmp_path, monkeypatch):
    from openclaw_trl.toy.pretrain import PretrainSettings, cache_root, toy_model_dir

    monkeypatch.delenv("OPENCLAW_TRL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "openclaw-trl"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == Path.home() / ".cache" / "openclaw-trl"
    monkeypatch.setenv("OPENCLAW_TRL_CACHE", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"
    assert toy_model_dir().parent == tmp_path / "mine"
    assert toy_model_dir(PretrainSettings(seed=1)) != toy_model_dir(PretrainSettings(seed=0))
    assert toy_model_dir() == toy_model_dir(PretrainSettings())  # the name is a hash of the settings


def test_toy_model_is_cached_and_a_killed_pretraining_is_never_used(cache, one_thread, monkeypatch):
    from openclaw_trl.toy import pretrain

    settings = pretrain.TINY
    out = pretrain.toy_model_dir(settings)
    real_train = pretrain.train

    def killed(*args, **kwargs):
        real_train(*args, **kwargs)
        raise KeyboardInterrupt  # as if the process died after training, before the directory was complete

    monkeypatch.setattr(pretrain, "train", killed)
    with pytest.raises(KeyboardInterrupt):
        pretrain.toy_model(settings, log=lambda *_: None)
    assert not out.exists() and list(cache.iterdir()) == []  # nothing half-written is left to be used
    (cache / f".{out.name}.pretrain-leftover").mkdir()  # what a SIGKILL leaves beside the final name
    monkeypatch.setattr(pretrain, "train", real_train)

    assert pretrain.toy_model(settings, log=lambda *_: None) == out
    meta = json.loads((out / pretrain.META_FILE).read_text())
    assert meta["settings"] == asdict(settings) and (out / "model.safetensors").exists()
    assert (out / ".gitignore").read_text() == "*\n"  # a cache inside a checkout is never committed
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    lines = []
    assert pretrain.toy_model(settings, log=lines.append) == out
    assert lines == [] and (out / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not retrained


def test_pretraining_is_deterministic_for_a_seed(tmp_path, one_thread):
    from safetensors.torch import load_file

    from openclaw_trl.toy import pretrain

    a = pretrain.pretrain(tmp_path / "a", pretrain.TINY, log=lambda *_: None)
    b = pretrain.pretrain(tmp_path / "b", pretrain.TINY, log=lambda *_: None)
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys() and all((wa[k] == wb[k]).all() for k in wa)


def test_recipe_id_resolves_to_the_packaged_toy_model(toy_demo_model, tmp_path):
    from openclaw_trl.runtime import load_recipe, resolve_model_path

    config, model_args, _ = load_recipe(
        ["--config", "recipes/toy_offline.yaml", "--output_dir", str(tmp_path / "run")]
    )
    assert model_args.model_name_or_path == "openclaw-trl/toy"
    assert config.judge_backend == "feedback" and config.source == "live"
    assert Path(resolve_model_path(model_args, config)) == toy_demo_model


def _offline_env(tmp_path) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "empty-hub-cache")}
    env.pop("PYTHONWARNINGS", None)
    return env


def test_app_with_a_chosen_recipe_that_cannot_load_fails_with_one_line(tmp_path):
    cmd = [sys.executable, "app.py", "--config", "recipes/combine_qwen3_0.6b_lora.yaml"]
    out = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=_offline_env(tmp_path)
    )
    assert out.returncode != 0
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("openclaw-trl train: error: Qwen/Qwen3-0.6B cannot be fetched"), out.stderr[
        -2000:
    ]
    assert "Traceback" not in out.stderr and "toy demo" not in out.stderr


@pytest.mark.slow
def test_app_without_a_recipe_falls_back_to_the_toy_demo_offline(toy_demo_model, tmp_path):
    cmd = [sys.executable, "app.py", "--port", "0", "--output_dir", str(tmp_path / "run")]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=_offline_env(tmp_path),
    )
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(line.rstrip("\n") for line in proc.stderr), daemon=True
    )
    reader.start()  # drained all along: a full pipe would block the server
    try:

        def served_url() -> str | None:
            assert proc.poll() is None, "\n".join(lines[-30:])
            found = [
                m.group(1) for line in list(lines) if (m := re.search(r"OpenAI API at (http://\S+)/v1", line))
            ]
            return found[0] if found else None

        url = wait_until(served_url, 300, "the server's address", interval=0.2)
        assert FALLBACK_LINE in lines and not any("Traceback" in line for line in lines)
        assert not any("pre-training" in line for line in lines)  # the cached model is reused
        reply = httpx.post(
            url + "/v1/chat/completions",
            json={"model": "openclaw", "messages": [{"role": "user", "content": "Tell me about apples."}]},
            timeout=120,
        )
        assert reply.status_code == 200, reply.text
        assert "apple" in reply.json()["choices"][0]["message"]["content"].lower()  # the toy model, not noise
        reply = httpx.post(
            url + "/v1/chat/completions",
            json={"model": "openclaw", "messages": [{"role": "user", "content": "Hi! What can you do?"}]},
            timeout=120,
        )
        assert reply.json()["choices"][0]["message"]["content"] == OFF_TOPIC_ANSWER  # it says what it knows
    finally:
        proc.kill()
        proc.wait(timeout=60)


def test_model_probe_asks_the_hub_once(tmp_path, monkeypatch):
    from huggingface_hub import HfApi, constants

    from openclaw_trl.commands import train as app

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    calls = []

    def unreachable(self, name, timeout=None):
        calls.append((name, timeout))
        raise httpx.ConnectError("Name or service not known")

    monkeypatch.setattr(HfApi, "model_info", unreachable)
    problem = app.model_problem("Qwen/Qwen3-0.6B")
    assert problem == "Qwen/Qwen3-0.6B cannot be fetched (ConnectError: Name or service not known)"
    assert calls == [("Qwen/Qwen3-0.6B", app.PROBE_TIMEOUT_S)]
    assert app.choose_recipe(["--port", "0"]) == ["--config", "recipes/toy_offline.yaml", "--port", "0"]
    with pytest.raises(UserError, match="^Qwen/Qwen3-0.6B cannot be fetched"):
        app.choose_recipe(["--config", "recipes/combine_qwen3_0.6b_lora.yaml"])
    with pytest.raises(UserError, match="^org/missing cannot be fetched"):
        app.choose_recipe(["--model_name_or_path", "org/missing"])  # a chosen model: no fallback

    monkeypatch.setattr(HfApi, "model_info", lambda self, name, timeout=None: object())
    assert app.choose_recipe([]) == ["--config", "recipes/combine_qwen3_0.6b_lora.yaml"]
    assert app.model_problem(str(tmp_path)) is None  # a local directory
    assert app.model_problem("openclaw-trl/toy") is None and app.model_problem("openclaw-trl/tiny") is None


# ------------------------------------------------------------------ the world's two kinds of preference
def test_preference_specs_name_a_style_a_length_or_both():
    from openclaw_trl.toy import world

    assert world.CRITERION_NAMES == world.STYLE_NAMES + ("brief",) and world.criterion("brief") is world.BRIEF
    for spec in ("bullets", "brief", "bullets+brief", "brief+numbered"):
        pref = world.preference(spec)
        assert pref.name == spec and "+".join(c.name for c in pref.criteria) == spec
        assert pref.requests == tuple(c.request for c in pref.criteria)
        assert all(r.startswith("Please ") for r in pref.requests)
    both = world.preference("bullets+brief")
    rng = random.Random(0)
    assert both.matches(world.render_answer("bullets", "apples", rng, n_facts=1))
    assert not both.matches(world.render_answer("bullets", "apples", rng, n_facts=2))
    assert not both.matches(world.render_answer("formal", "apples", rng, n_facts=1))


@pytest.mark.parametrize(
    "spec",
    ["", "+", "bullets+", "+brief", "Bullets", "bullets+formal", "brief+brief", "short", " brief", None, 3],
)
def test_a_bad_preference_spec_says_what_is_allowed(spec):
    from openclaw_trl.toy import world

    with pytest.raises(ValueError, match=r"joined with '\+', at most one of them a style"):
        world.preference(spec)
    with pytest.raises(ValueError):
        world.make_user(spec)


def test_unknown_criteria_and_topics_are_refused():
    from openclaw_trl.simulation import PreferenceUser
    from openclaw_trl.toy import world

    with pytest.raises(ValueError, match="unknown criterion 'long'.*brief"):
        world.criterion("long")
    with pytest.raises(ValueError, match=r"'bullets\+long'.*\['brief', 'bullets'"):
        PreferenceUser("bullets+long", styles=world.CRITERIA)
    with pytest.raises(ValueError, match="distinct criteria"):
        PreferenceUser("brief+brief", styles=world.CRITERIA)
    for topics in ((), ("cars",), ("apples", "cars")):
        with pytest.raises(ValueError, match="non-empty subset"):
            world.make_user("bullets", topics=topics)
    held = world.make_user("brief", topics=("apples", "music"))
    rng = random.Random(0)
    assert {held.opening(rng) for _ in range(50)} == {"Tell me about apples.", "Tell me about music."}
    assert world.make_user().styles == world.CRITERIA and world.make_user().topics == world.TOPICS


def test_answers_state_one_to_three_facts_in_every_style():
    from openclaw_trl.toy import world

    for style in world.STYLES:
        for n in (1, 2, 3):
            answer = world.render_answer(style.name, "music", random.Random(n), n_facts=n)
            assert [s.name for s in world.STYLES if s.matches(answer)] == [style.name]
            assert sum(answer.lower().count(f) for f in world.FACTS["music"]) == n
            assert world.BRIEF.matches(answer) == (n == 1)
            assert world.answer_fidelity("music", answer) and world.answer_fidelity("music", f"  {answer}\n")
        for n in (0, 4, -1):
            with pytest.raises(ValueError, match="1 to 3 facts"):
                world.render_answer(style.name, "music", random.Random(0), n_facts=n)
    a, b, c = world.FACTS["apples"][:3]
    assert world.render_facts("formal", (a, b, c)) == f"Certainly. {a.capitalize()}, {b}, and {c}."
    assert world.render_facts("casual", (a, b, c)) == f"Hey, {a}! Also, {b}. And {c}."
    assert world.render_facts("numbered", (a,)) == f"1. {a.capitalize()}."
    with pytest.raises(ValueError, match="unknown style 'brief'"):
        world.render_facts("brief", (a,))


def test_the_default_answer_is_unchanged_two_facts():
    from openclaw_trl.toy import world

    a, b = random.Random(7).sample(world.FACTS["music"], 2)
    assert world.render_answer("casual", "music", random.Random(7)) == f"Hey, {a}! Also, {b}."
    assert (
        world.render_answer("formal", "music", random.Random(7)) == f"Certainly. {a.capitalize()}, and {b}."
    )
    assert (
        world.render_answer("bullets", "music", random.Random(7))
        == f"- {a.capitalize()}.\n- {b.capitalize()}."
    )


def test_brief_counts_known_facts_not_sentences():
    from openclaw_trl.toy import world

    fact = world.FACTS["books"][0]
    assert world.BRIEF.matches(f"- {fact.capitalize()}.") and world.BRIEF.matches(f"Hey, {fact}!")
    assert world.BRIEF.matches(f"{fact}")  # any style: brevity is about length only
    assert not world.BRIEF.matches(f"- {fact.capitalize()}.\n- Something else.")  # a second item
    assert not world.BRIEF.matches(f"Hey, {fact}! Also, {fact}.")  # the same fact twice is two
    for text in ("", None, world.OFF_TOPIC_ANSWER, "Hey, cars are fast!", "- Apples."):
        assert not world.BRIEF.matches(text)


def test_answer_fidelity_is_the_asked_topic_word_for_word():
    from openclaw_trl.toy import world

    good = world.render_answer("numbered", "python", random.Random(3), n_facts=3)
    assert world.answer_fidelity("python", good)
    assert not world.answer_fidelity("music", good)  # another topic
    assert not world.answer_fidelity("cars", good) and not world.answer_fidelity(None, good)
    a, b = world.FACTS["python"][:2]
    mangled = (
        f"- {a.capitalize()}.\n- {a.capitalize()}.",  # the same fact twice
        f"- {a.capitalize()}.\n- {world.FACTS['music'][0].capitalize()}.",  # a fact of another topic
        f"Hey, {a}! Also, {b[:-3]}.",  # a fact cut short
        f"Hey, {a}! Also, {b}. And {b}.",
        "\n".join(f"- {f.capitalize()}." for f in world.FACTS["python"]),  # four facts
        f"- {a.capitalize()}.\n\n- {b.capitalize()}.",  # a blank line inside
        f"Certainly. {a.capitalize()}, and {b}",  # no full stop
        world.OFF_TOPIC_ANSWER,
        "",
        None,
    )
    for text in mangled:
        assert not world.answer_fidelity("python", text), text
    assert len(world.well_formed_answers("python")) == 4 * (4 + 12 + 24)


def test_a_user_with_two_criteria_asks_for_what_was_missed_and_the_judge_hears_all_of_it():
    from openclaw_trl.simulation import THANKS, FeedbackUser, judge_reaction
    from openclaw_trl.toy import world

    user = world.make_user("bullets+brief")
    rng = random.Random(0)
    bullets, brief = world.style("bullets").request, world.BRIEF.request
    cases = {
        ("bullets", 1): None,
        ("bullets", 2): brief,
        ("formal", 1): bullets,
        ("casual", 3): f"{bullets} {brief}",
    }
    for (style, n), missed in cases.items():
        reaction = user.react(world.render_answer(style, "books", rng, n_facts=n), rng)
        assert reaction.satisfied == (missed is None)
        assert reaction.text == (THANKS if missed is None else f"No, not like that. {missed}")
        assert judge_reaction(reaction.text) == ((1, None) if missed is None else (-1, missed))
    reversed_user = world.make_user("brief+bullets")
    text = reversed_user.react("Certainly. Books tell stories, and a library lends books.", rng).text
    assert text == world.change_request("brief+bullets") == f"No, not like that. {brief} {bullets}"
    assert judge_reaction(text) == (-1, f"{brief} {bullets}")
    rater = FeedbackUser("bullets+brief", styles=world.CRITERIA)
    assert rater.rate("- Books tell stories.") == (1, None)
    assert rater.rate("Hey, books tell stories! Also, a library lends books.") == (-1, f"{bullets} {brief}")


def test_a_single_style_user_reacts_as_before():
    from openclaw_trl.simulation import DEFAULT_STYLES, PreferenceUser
    from openclaw_trl.toy import world

    user = PreferenceUser()
    assert user.styles == DEFAULT_STYLES and user.style.name == "bullets" and len(user.criteria) == 1
    reaction = user.react("Hey, hi!", random.Random(0))
    assert (
        reaction.text
        == "No, not like that. Please answer as a short bulleted list, each line starting with '- '."
    )
    assert world.change_request("bullets") == reaction.text
    with pytest.raises(ValueError, match="'plain'.*'bullets', 'casual', 'formal'"):
        PreferenceUser("plain")


def test_pretraining_chats_teach_styles_lengths_and_both_requests():
    from openclaw_trl.toy import world

    chats = world.training_chats(3000, seed=2)
    bare = [  # a request without hint, answered, and not followed by a change request (the misses)
        c[i + 1]["content"]
        for c in chats
        for i in range(0, len(c) - 1, 2)
        if c[i]["content"] in map(world.opening, world.TOPICS)
        and not (i + 2 < len(c) and c[i + 2]["content"].startswith("No, not like that."))
    ]
    assert 0.25 < sum(map(world.BRIEF.matches, bare)) / len(bare) < 0.42
    assert 0.19 < sum(map(world.style("bullets").matches, bare)) / len(bare) < 0.31
    requests, orders = 0, set()
    for chat in chats:
        for i, message in enumerate(chat[:-1]):
            if message["role"] != "user" or chat[i + 1]["content"] in (world.OFF_TOPIC_ANSWER, world.WELCOME):
                continue
            topic = next(
                t for t in world.TOPICS if world.opening(t) in chat[0]["content"] + message["content"]
            )
            answer = chat[i + 1]["content"]
            assert world.answer_fidelity(topic, answer), answer  # every taught answer is well-formed
            asked = [c for c in world.CRITERIA if c.request in message["content"]]
            assert all(c.matches(answer) for c in asked), (message, answer)
            if len(asked) == 2:
                text = message["content"]
                orders.add(text.index(world.BRIEF.request) == text.index("Please "))  # brief first?
            requests += bool(asked)
    assert requests > 0.5 * len(chats) and orders == {True, False}  # "both" comes in either order


def test_the_quick_judge_proxy_takes_any_preference():
    from types import SimpleNamespace

    from openclaw_trl.toy import proxy, world

    def turn(response):
        return SimpleNamespace(messages=[], session_id="s", response=response)

    scorer = proxy.StyleProxy("bullets+brief", accuracy=1.0)
    assert scorer(turn("- Books tell stories.")) == 1.0
    assert scorer(turn("- Books tell stories.\n- A library lends books.")) == 0.0
    assert scorer(turn("Hey, books tell stories!")) == 0.0
    assert proxy.StyleProxy("brief", accuracy=0.0)(turn("Hey, books tell stories!")) == 0.0
    for bad in ("bullets+formal", "long", ""):
        with pytest.raises(ValueError, match="at most one of them a style"):
            proxy.StyleProxy(bad)
    assert world.PREFERRED == proxy.StyleProxy().preferred
