"""``OpenClawConfig``: the TRL-style configuration of a run, parsed from a recipe YAML by ``TrlParser``.

It subclasses TRL's ``GRPOConfig`` so that everything the PPO loss, the optimizer, logging,
checkpointing and ``accelerate`` need keeps its TRL name and meaning. One thing differs: a live chat
turn has exactly one completion, so there is no group of ``num_generations`` completions to
normalise rewards over. ``GRPOConfig.__post_init__`` rejects ``num_generations < 2`` and requires the
generation batch to hold whole groups; we therefore run ``TrainingArguments``' validation (via TRL's
``_BaseConfig``) and do the batch geometry ourselves (``config_trl.derive_batch_geometry``): one update consumes
``batch_size`` judged samples, split in micro-batches of ``per_device_train_batch_size``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from trl import GRPOConfig

from openclaw_trl.config_checks import (
    ADVANTAGE_BASELINES,
    ENGINES,
    OPD_KD_SCHEDULES,
    check_openclaw_fields,
    check_users,
)
from openclaw_trl.config_trl import (
    check_adapter_history,
    check_importance_sampling_clip,
    check_trackers,
    check_vllm_server_fields,
    derive_batch_geometry,
    refuse_fields_of_the_other_engine,
    refuse_inapplicable_trl_fields,
    set_live_training_defaults,
)
from openclaw_trl.engines.prefix_cache import DEFAULT_PREFIX_CACHE_MB
from openclaw_trl.judge import METHODS
from openclaw_trl.judging import JudgeConfig, QuickJudgeConfig
from openclaw_trl.serving.limits import RequestLimits
from openclaw_trl.serving.settings import ServerSettings
from openclaw_trl.sessions import SessionConfig
from openclaw_trl.trainer.guard import NEUTRAL_PROMPTS, GuardConfig


@dataclass
class OpenClawConfig(GRPOConfig):
    r"""
    Configuration of an openclaw-trl run: the learning method, the judges, the engine and the server.
    Every field of TRL's ``GRPOConfig`` / ``TrainingArguments`` is available too (``learning_rate``,
    ``num_iterations``, ``epsilon``, ``loss_type``, ``output_dir``, ``save_steps``, ``report_to``, …).

    It is the one source of configuration: ``judge_config()``, ``session_config()``, ``server_settings()``,
    ``request_limits()`` and ``engine_kwargs()`` build the settings of the scorer, the collector, the server
    and the engine from these fields. Defaults are defined once, by the components: a field that sets a
    component's value takes its default from that component's dataclass (``JudgeConfig``, ``SessionConfig``,
    ``ServerSettings``, ``RequestLimits``), so a component built directly and one built from a recipe behave
    the same.

    > Parameters that control the learning method

    method (`str`, defaults to `"combine"`):
        `"rl"` (Binary RL: judge reward broadcast over the tokens), `"opd"` (hindsight on-policy
        distillation: per-token advantage = teacher log-prob − student log-prob) or `"combine"` (both,
        weighted by `w_rl` and `w_opd`). [OpenClaw-RL](https://github.com/Gen-Verse/OpenClaw-RL)
    w_rl (`float`, defaults to `1.0`), w_opd (`float`, defaults to `1.0`):
        Weights of the reward and the OPD terms in `A = w_rl * r + w_opd * (lp_T - lp_old)`. `rl` forces
        `w_opd = 0` and `opd` forces `w_rl = 0`.
    batch_size (`int`, defaults to `16`):
        Judged samples consumed by one update. Surplus samples stay queued for the next update.
    teacher (`str`, defaults to `"base"`):
        Weights that score the hint-conditioned prompt: `"base"` (adapter disabled, as in the reference)
        or `"policy"` (the current adapter, the SDPO "live" teacher).
    epsilon (`float`, defaults to `0.2`), epsilon_high (`float`, defaults to `0.28`, `epsilon` for `opd`):
        PPO clip range `[1 - epsilon, 1 + epsilon_high]`: DAPO's clip-higher 0.2/0.28 for `rl` and `combine`,
        the symmetric 0.2/0.2 of the reference for `opd`. A recipe that sets `epsilon_high` keeps its value.
    beta (`float`, defaults to `0.0`):
        Weight of TRL's per-token KL penalty to the base model (the policy with the adapter disabled, as TRL
        does with PEFT), logged as `kl`. It costs one no-grad forward per batch.
    mask_truncated_completions (`bool`, defaults to `False`):
        Leave turns cut at the token limit (stored `finish_reason` `"length"`) out of the loss (TRL's
        semantics: their completion mask is zeroed). Samples without a stored finish reason count as finished.
    loss_type (`str`, defaults to `"dapo"`):
        TRL's aggregation of the per-token loss; `"dapo"` (TRL's default) = the sum over every reply token of
        the batch divided by their number: each token counts the same, so a liked reply's update does not
        grow as the reply gets shorter. `"grpo"` (a token mean per sample, then the mean over samples) gives a
        short reply's tokens more weight: with liked replies in most batches it pushes the model towards its
        shortest liked answers and the answers stop varying (on the toy benchmark, Best-of-4 with the memory
        judge: distinct answers 0.44-0.53 at the end in 2 seeds with `grpo`, 0.84-0.88 with `dapo`).
    vllm_importance_sampling_correction (`bool`, defaults to `True`):
        Truncated importance sampling against the engine's sampling log-probs when a batch is stale or
        several optimisation passes are made (`vllm_importance_sampling_clip_max`, 3 by default, caps the
        ratio). Applies to both engines here, not only vLLM.
    vllm_importance_sampling_mode (`str`, defaults to `"token_truncate"`):
        Per-token truncated weights. TRL's default, `"sequence_mask"`, multiplies the ratios of a whole turn
        and zeroes turns outside the bounds: long chat turns would mostly be dropped.

    > Parameters that control which samples are trained on

    max_staleness (`int` or `None`, defaults to `None`):
        When set to K, a batch never holds a sample sampled more than K policy versions ago (current
        version − the sample's version > K): such samples are dropped when the trainer takes a batch,
        kept in the store with their `dropped_reason` (exported, counted as `samples/dropped_stale` and in
        `/v1/status`), and the batch is filled with the next samples. `None` trains on every sample, the
        stale ones with the truncated importance-sampling correction.
    max_samples_waiting (`int`, defaults to `4096`):
        The most judged samples that wait for an update. When turns arrive faster than updates take them
        (many sessions, an agent that calls day and night, Best-of-N groups), the oldest beyond this many are
        dropped as the trainer takes a batch: kept in the store with their `dropped_reason` (`backlog: ...`),
        counted as `samples/dropped_backlog` and in `/v1/status`, logged as a warning. The queue, and the
        work each update spends looking at it, stay bounded however long the server runs, and training
        follows the recent turns. At least `batch_size`.
    prm_monitor (`bool`, defaults to `False`):
        With `method: opd`, also run the PRM (reward) votes and store the reduced reward on each turn and
        sample, for monitoring only: the loss stays OPD's (`w_rl = 0`, a sample only with an accepted hint),
        and each update logs the batch's mean as `rollout/prm_eval_score`. Refused with another method
        (`rl` and `combine` already train on the PRM reward).

    > Parameters that control top-K distillation (optional, added to the PPO loss)

    w_kd (`float`, defaults to `0.0`):
        Weight of the top-K reverse-KL distillation loss; 0 disables it.
    kd_topk (`int`, defaults to `20`):
        K, the number of teacher (or student) top tokens per position.
    kd_topk_source (`str`, defaults to `"teacher"`):
        Whose top-K ids form the support: `"teacher"` (the reference: the engine returns the teacher's top-K
        with its log-probs when the turn is scored) or `"student"` (SDFT/SDPO: the current policy's top-K ids
        at each position, taken from the loss forward; the teacher's log-probs on those ids come from a
        no-grad forward of the trainer's model on the hint-augmented prompt and the original completion, with
        the adapter disabled for `teacher: base` and enabled for `teacher: policy`). Both sides are
        `log_softmax(logits / temperature)` at the training temperature.
    kd_cap (`float`, defaults to `10.0`):
        Per-token cap of the KD term: it bypasses the PPO clip, so it is bounded.

    > Parameters that control the session baseline and staged distillation

    advantage_baseline (`str`, defaults to `"none"`):
        `"none"`: the RL term is `w_rl * r`. `"session_mean"`: it is `w_rl * (r - b)` with `b` the mean
        judged reward of the session's earlier turns (0 for its first judged turn); `b` is stored with each
        sample when it is judged (every sample has one), so a replayed or resumed run gets the same
        advantages. `"batch_mean"`: `b` is the mean reward of the batch's other judged samples (leave one out,
        RLOO: unbiased, as the other turns do not depend on this one's reply); a batch whose replies were all
        liked then moves nothing, so the policy is not sharpened onto the few replies it happened to sample
        (the answers stay as varied as the person allows). With a baseline every judged turn becomes a sample,
        an `r = 0` turn included (its RL advantage is `-b`): a rule that kept only the `r != 0` turns would add
        `b * grad P(kept)` to the expected update, which is not 0. The OPD term and Best-of-N group samples
        are unchanged. Logged as `rl/baseline_mean`.
    opd_kd_schedule (`str`, defaults to `"constant"`):
        How the OPD weight and the top-K KD weight move with the optimizer step `t`: `"constant"` (`w_opd`
        and `w_kd` throughout), `"switch"` (OPD with `w_opd` before `start`, then top-K KD with `w_kd` only)
        or `"ramp"` (`w_opd * (1 - a)` and `w_kd * a` with `a = clamp((t - start) / (end - start), 0, 1)`).
        A schedule other than `"constant"` needs `w_kd > 0` and a method with an OPD term (`opd` or
        `combine`). Logged per update as `opd/weight` and `kd/weight`, with `kd/loss_share =
        |w_kd(t) * kd| / (|PPO loss| + |w_kd(t) * kd|)`: a cheap proxy of the KD share, computed on the
        loss values (the share of the gradient would need a second backward pass).
    opd_kd_schedule_steps (`list[int]` or `None`, defaults to `None`):
        `[start, end]` optimizer steps of the schedule, `0 <= start <= end` (`--opd_kd_schedule_steps 0 2`
        on the command line). Required by `"switch"` (which only uses `start`) and `"ramp"`.

    > Parameters that control Best-of-N serving

    best_of_n (`int`, defaults to `1`):
        Candidates sampled for each trainable turn (1 = off, at most 16). The quick judge scores each, the
        best is served (streamed once chosen: the first token waits for all N generations and the quick
        judging), and all N are stored as one group with their scores and trained as GRPO:
        `A_i = w_rl * (r_i - mean(r))`, scaled as `scale_rewards` says; a candidate without a score gets
        the group mean (A = 0), a group without any score is stored but not trained. The served candidate
        also goes through the next-state pipeline. With `engine: hf` it must be at most
        `engine_max_batch_size` (the N rows decode in one batch after one prefill of the prompt); it needs
        a method with an RL term (`rl` or `combine`) and a serving source (`live` or `simulated`). Which
        candidate is served, and how its next-state verdict is weighted: `best_of_n_explore`.
    best_of_n_explore (`float`, defaults to `0.25`):
        The chance that a turn serves a uniformly random candidate of its group instead of the best one.
        The served candidate's next-state verdict (its RL reward, and its OPD hint) is drawn from what was
        served, not from the policy; its sample is weighted by `w = (1/N) / P(served)` with `P(served) =
        (1 - e) * 1(best) + e / N`, which makes its expected update the on-policy gradient exactly (the
        candidates are N draws of the policy, and a uniform pick of one of them is a draw of the policy).
        `w` is `1 / (N (1 - e) + e)` for the best candidate and `1 / e` for another one (4 at most with the
        default). `0` always serves the best: the verdict then has no unbiased weight and is not trained on
        (the group samples still are).
    quick_judge_backend (`str`, defaults to `"engine"`):
        Who scores the candidates: `"engine"` (the colocated engine with base weights, greedy, rating the
        reply to the conversation 0-10; an output without a rating is no score), `"openai"` (the same
        prompt to the endpoint of `judge_openai_base_url`, `judge_openai_model` and
        `judge_openai_api_key_env`), `"callable"` (`quick_judge_callable`) or `"memory"` (what the user
        already said: `score(y) = sum_h w_h log pi_T(y | x + h) - log pi(y | x)` over the
        `quick_judge_hints` most recent hints the judge extracted, `w_h` each distinct hint's share,
        `pi_T` the `teacher` weights, `log pi(y | x)` the candidate's sampling log-prob; one batched
        scoring pass of N x (distinct hints) rows sharing the conversation prefix; no hint yet: no score,
        the first candidate is served). All scores of a turn arrive within `judge_timeout_s` (a late one is
        no score), `judge_max_concurrency` at a time.
    quick_judge_callable (`str`):
        The `callable` quick judge, `package.module:function`, called as
        `fn(turn: QuickJudgeInput) -> float | None` (`openclaw_trl.judging.QuickJudgeInput`: `messages`,
        the conversation up to the user's message; `response`, one candidate's text; `session_id`).
        Higher is better; None is no opinion.
    quick_judge_hints (`int`, defaults to `4`):
        The `memory` quick judge's number of most recent hints (1-16), from the sessions not marked
        private; each distinct hint weighs its share of them, so one misread correction is one vote.
    scale_rewards (`str`, defaults to `"group"`):
        TRL's scaling of the group-relative advantages of the Best-of-N group samples (judged next-state
        samples keep their own rule): `"group"` divides by the group's score std + 1e-4, `"batch"` by the
        std of the group scores in the training batch + 1e-4, `"none"` leaves them as they are. The
        default puts the group samples on the scale of the judged ones (|A| about 1, at most sqrt(N - 1)),
        whatever the quick judge's scale: the `memory` judge's scores span several nats, and unscaled they
        would outweigh the person's own +1/-1 verdicts. Only for `best_of_n > 1`.
    group_std_floor (`float`, defaults to `0.0`):
        The smallest std the group scores are divided by with `scale_rewards` `"group"` or `"batch"`, in the
        quick judge's unit (nats for `memory`, rating points for `engine`): `A_i = (r_i - mean(r)) /
        (max(std, floor) + 1e-4)`. Without a floor, a group whose candidates are all about as good (every one
        already in the person's style) still gets advantages of about +-1 from whatever small differences the
        quick judge sees between them, and the policy narrows onto the few replies it happens to score highest;
        with a floor such groups move the policy little. `0` is TRL's rule. Only for `best_of_n > 1`.
    group_entropy_coef (`float`, defaults to `0.0`):
        Entropy regularisation of the Best-of-N group rewards: each candidate's reward is its quick-judge
        score minus `group_entropy_coef` times its log-probability under the policy that sampled it (the sum
        of its tokens' sampling log-probs), `r_i = score_i - lambda * log pi(y_i | x)`. The groups then
        maximise the expected score plus `lambda` times the policy's entropy, whose optimum is `pi(y) ~
        exp(score(y) / lambda)`: replies the quick judge scores alike keep alike probabilities instead of the
        policy narrowing onto the few it happens to score highest. In the quick judge's unit per nat (the
        `memory` judge's scores are nats, so `1.0` weighs one nat of score like one nat of log-probability).
        `0` trains on the scores as they are. Only for `best_of_n > 1`.

    > Parameters that control the judges

    judge_backend (`str`, defaults to `"engine"`):
        `"engine"` (the colocated engine with base weights), `"openai"` (any OpenAI-compatible endpoint),
        `"callable"` (`package.module:function`) or `"feedback"` (👍/👎 ratings and correction text only).
    judge_m (`int`, defaults to `1`):
        Votes per judged turn (the reference uses 3 for RL, 1 for OPD/Combine).
    judge_temperature (`float`, defaults to `0.6`), judge_max_tokens (`int`, defaults to `2048`),
    judge_top_p (`float`, defaults to `1.0`):
        Sampling of the judge votes.
    judge_openai_base_url, judge_openai_model (`str`), judge_openai_api_key_env (`str`, defaults to `"OPENAI_API_KEY"`):
        The `openai` backend: endpoint, model and the name of the environment variable holding the key.
    judge_callable (`str`):
        The `callable` backend: `package.module:function`.
    judge_max_concurrency (`int`, defaults to `4`), judge_timeout_s (`float`, defaults to `120`):
        Bounded concurrency and the timeout of one judge call (an engine batch of votes, one HTTP vote, one
        callable call) and of one teacher scoring call. A failed or late vote counts as no vote; a late
        teacher call leaves its turns without an OPD sample. Engine work whose caller gave up is cancelled.
    judge_max_attempts (`int`, defaults to `3`):
        Judging attempts of a turn that raise (a broken judge callable, a malformed turn) before the turn
        is set aside as `failed` with its error (counted in `/v1/status`, kept in the export); the other
        turns are judged meanwhile.

    > Parameters that control the engine

    engine (`str`, defaults to `"hf"`):
        `"hf"` (Transformers + PEFT, CPU or GPU), `"vllm"` (colocated vLLM with LoRA adapters) or
        `"vllm_server"` (running stock vLLM servers, `vllm_server_urls`, over HTTP; they serve, judge and
        score the teacher, and load each published adapter through vLLM's runtime LoRA API). The
        `vllm_gpu_memory_utilization`, `vllm_enable_sleep_mode` and `vllm_max_model_length` fields of
        `GRPOConfig` configure the vLLM engine (`vllm_max_model_length: null`: `max_context_len`, and with that null too the model's own context) and are refused
        with `engine: hf`. Both engines load the weights in the `dtype` of the recipe (`auto`: float32 on
        CPU; on GPU bfloat16 with hf, the checkpoint's dtype with vllm) with the LoRA adapter of its `lora_*` fields.
    engine_max_batch_size (`int`, defaults to `16`):
        Concurrent requests batched into one generation pass of `engine: hf`; refused with `engine: vllm`,
        which batches requests itself (continuous batching).
    prefix_cache_mb (`int`, defaults to `4096`):
        Memory (MiB, on the engine's device) of `engine: hf`'s prompt KV cache; `0` turns it off. The turns
        of one conversation share most of their prompt (an agent re-sends its system prompt, tools and
        history every turn): a prompt of at least 256 tokens starts from the KV of the longest prefix it
        shares with a prompt computed before on the same weights (the base model, or one published adapter
        version), so a turn and its teacher scoring only compute their new tokens. Results are the same
        with and without it. Least recently used prompts go first; ~10k tokens of a 4B model take ~1.5 GB
        in bfloat16 (twice that in float32): lower it on a small GPU. At start it is capped at a quarter of
        the memory the device has available (CPU: `MemAvailable` or the container's limit; CUDA: its free
        memory), with a logged line saying so; `/v1/status` (`memory`) reports the bytes it holds and its
        budget. The vLLM engines cache prefixes themselves (colocated: always on; servers: `vllm serve
        --enable-prefix-caching`), so it is refused with them.
    vllm_server_urls (`list[str]`, defaults to `[]`):
        Roots (`http(s)://host:port`) of the vLLM servers of `engine: vllm_server` (required there), each
        started as `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve MODEL --enable-lora --max-lora-rank R
        --logprobs-mode processed_logprobs --enable-prefix-caching` on the recipe's `model_name_or_path`
        (checked at start, prefix caching aside: it only saves work). Requests
        go to the server with the fewest in flight; a failing one is out of rotation and retried every 5 s.
        With `users`, each user's adapter is loaded on the servers under a name of its own: start them with
        `--max-loras` of at least `max_adapters` (by default the number of users, up to 8; one more lets a
        new version run beside the old one), which is checked at start from their `/metrics`.
    vllm_server_api_key_env (`str` or `None`, defaults to `None`):
        Name of the environment variable holding the servers' bearer key (`vllm serve --api-key`).
    vllm_server_adapter_dir (`str` or `None`, defaults to `None`):
        Where published adapter versions are written for the servers to load: a path every server reads at
        the same place (a shared mount across machines); defaults to `<output_dir>/served_adapters`.
    vllm_server_request_timeout (`float`, defaults to `120`):
        Seconds a server may take to answer (a stream: between two tokens) before it is taken out of rotation
        and the request moves to another server.
    vllm_server_max_learn_requests (`int`, defaults to `4`):
        Judge votes and teacher pairs in flight per server; chat requests are never held back by them.
    vllm_server_timeout (`float`, defaults to `240`):
        TRL's field, with its meaning: seconds to wait at start for a vLLM server to answer.

    > Parameters that control the memory of an update

    activation_checkpointing (`bool`, defaults to `False`), activation_checkpointing_kwargs (`dict`):
        The `TrainingArguments` fields (`gradient_checkpointing` is their older name): keep each decoder
        layer's input in the forward pass and recompute the rest in the backward pass, with the LoRA adapter
        as without it (the same gradient). About a third more compute, for activation memory that no longer
        grows with layers x prompt length: it pays for agent-sized prompts (10-30k tokens), whose activations
        dominate an update's memory; `{"every_n_layers": k}` checkpoints every k-th layer only. Whatever the
        prompt length, the LM head only runs on the completion positions.

    > Parameters that control serving and the sample source

    source (`str`, defaults to `"live"`):
        Where turns come from: `"live"` (people through the UI/API), `"replay"` (recorded conversations
        in `replay_path`) or `"simulated"` (a simulated user class `simulated_user`).
    replay_path (`str`), simulated_user (`str`, `package.module:Class`), simulated_sessions (`int`):
        Options of the replay and simulated sources.
    host (`str`, defaults to `"127.0.0.1"`), port (`int`, defaults to `7860`):
        Where the UI and the OpenAI-compatible API listen.
    api_key_env (`str`):
        Name of an environment variable holding a bearer token the API then requires.
    served_model_name (`str`, defaults to `"openclaw"`):
        The model name the API reports and accepts.
    session_idle_timeout (`float`, defaults to `1800`):
        Seconds of inactivity after which a session ends (its last turn then has no next state). Half an
        hour: a person reading a long answer or an agent running a long tool comes back within it, and a
        longer wait costs nothing (open sessions live in the store, and a turn without a reply is never
        trained on either way).
    train_anonymous (`bool`, defaults to `True`):
        Train on conversations whose requests carry no session id (an agent such as OpenClaw sends none): a
        request whose history continues a served turn joins that turn's conversation (the reply as the client
        saw it and the messages since the reply before it are compared, normalised the way agents rebuild
        history) and gives that turn its next state. On by default because a server has one owner (one API
        key, or none). `false` learns only from conversations with a session id; a single conversation is
        kept out with `X-Session-Private: true`.
    correction_window_s (`float`, defaults to `60`):
        Seconds a bare 👎 (a rating without text) waits for its correction before it can be trained, from 0
        (off: a 👎 is trained as soon as it is judged and a batch is full) to 600. A correction (or an edited
        answer) sent within the window replaces the 👎, so the correction is what is learned; the next
        message of the conversation, or its end, closes the window early and the 👎 stands. The reply to a
        👎 says until when (`correction_until`), and `/v1/status` counts the ratings waiting
        (`correction_window`). A 👍 never waits. The window is kept in the store: it survives a restart.
    learn_unstored_responses (`bool`, defaults to `True`):
        Learn from `POST /v1/responses` requests sent with `store: false` (OpenClaw sends it with every
        request). Such a response is served and its turn stored as any other, but it is not kept for
        retrieval (`GET /v1/responses/{id}` and `previous_response_id` answer 404). `false`: their
        conversation is flagged private (stored, never learned from).
    store_path (`str`):
        SQLite store of sessions, turns and samples; defaults to `<output_dir>/openclaw.sqlite`.

    > Parameters that control users (one base model, one adapter per person)

    users (`list`, defaults to `None`):
        People (or agents) who each teach an adapter of their own on the one base model: a list of
        `{name, api_key_env}` mappings (on the command line `--users alice:ALICE_KEY bob:BOB_KEY`), with an
        optional `simulated_user` per user for `source: simulated`. A name is 1-32 characters of `a-z 0-9 _ -`;
        `api_key_env` names the environment variable holding the user's API key (set and distinct, or the
        server refuses to start). A request's bearer key selects its user, and the UI's login asks for the
        user's name and key. Each user's store, checkpoints, adapter, metrics and exports live in
        `<output_dir>/users/<name>/`, so their sessions, turns, votes, hints, samples and versions are theirs
        alone: the judge and the teacher only see that user's conversation and hints, and every route
        (`/v1/status`, `/v1/adapters`, `/v1/learning`, feedback, stored responses) answers for the caller
        only. One trainer process holds the base model once; each user's LoRA weights, optimizer, scheduler,
        step, lineage and checkpoints are their own, and the users take turns to update (round-robin among
        those with a full batch). `None`: one implicit user, the layout of `output_dir` as without users.
        Refused with `store_path`, `api_key_env` (each user has a key), `source: replay`, several processes,
        and `report_to` trackers that keep one run per process (`trackio`,
        `wandb`, ...: they would mix the users' metrics; `none` and `tensorboard` are fine).
    max_adapters (`int`, defaults to the number of users, at most 8):
        Users' adapters held on the device at once by the serving engine (`hf`: device slots, the least
        recently used idle adapter is moved out to CPU memory when another user's is needed; `vllm`: the
        adapters vLLM batches together, its `max_loras` is `max_adapters + 1`; `vllm_server`: every server
        must run `--max-loras` of at least this, checked at start). Fewer slots than active users saves memory
        and costs a copy of an adapter per switch (vLLM: requests wait for a slot). Only with `users`.

    > Parameters that control where a run starts

    fresh_start (`bool`, defaults to `False`):
        A run on an `output_dir` that holds checkpoints continues from the latest complete one (adapter,
        optimizer, scheduler, RNG state, step and policy version; samples consumed by later updates are
        queued again), or from `resume_from_checkpoint` when that names one. `fresh_start: true` starts at
        step 0 instead: everything in `output_dir` and the store are first moved into
        `<output_dir>/previous-<UTC time>/`, so nothing of the old run is deleted. Whatever `save_strategy`
        says, the end of training (`max_steps`, Ctrl-C, SIGTERM) saves a checkpoint of the last update.

    > Parameters that control adapter versions (history, rollback, pause)

    adapter_history (`int`, defaults to `10`):
        Keep the last N published adapter versions restorable: every update is checkpointed (adapter,
        optimizer, scheduler, RNG state and step; `save_strategy: steps`, `save_steps: 1`, the defaults) and
        the last N checkpoints are kept (`save_total_limit` is set to N; the initial adapter is checkpointed
        as version 0 before the first update). Each version's step, time, samples and metrics are recorded
        in the store; `GET /v1/adapters` lists them and `POST /v1/adapters/rollback` restores one (published
        as the next policy version, so versions stay monotonic). A checkpoint holds the adapter and about
        twice its size in optimizer state. `0` keeps no history (no rollback) and checkpoints as
        `save_strategy` / `save_steps` / `save_total_limit` say; with N > 0 another `save_strategy` or
        `save_steps`, a `save_total_limit` other than N, or `save_only_model` (no optimizer state) is refused.
        Pausing learning (`POST /v1/learning`) works either way.

    > Parameters that control the version guard (no broken adapter is served)

    guard (`bool`, defaults to `True`):
        Check every new adapter before it is served, with signals that need no knowledge of what the person
        prefers beyond what they said: the trained weights' next-token distributions are compared, at every
        reply position of a few short rows (the person's `guard_recent_prompts` most recent turns with their
        served replies, and `guard_neutral_prompts` with replies sampled once from the base), with the base
        model's (adapter off), as it was or, for a row that does not explain, also as told the person's most
        recent hints (the OPD teacher's context). `guard/kl`: the mean KL(new || reference) per token of the
        row that moved most, in nats (large where the new weights put their mass on tokens the reference finds
        implausible: replies that start with a stray word, repeat or fall apart; small where they only
        sharpened what the reference allows, the taught style included); `guard/implausible`: at the reply
        position where it is largest, the probability mass the new weights moved onto tokens the reference
        gives less than 1 in 8,000 (a wrong fact or a stray word: answers that start to break a little at a
        time show here first); `guard/entropy_gap`: the new weights' mean next-token entropy minus the base's
        (it falls when answers collapse onto a few strings, it rises when they fall apart). A version past a
        bound (or with inf/NaN weights) is held back: the last version that passed keeps serving, the trainer
        rewinds to it (weights, optimizer and scheduler states, kept in memory) and trains on from there, the
        samples of the held-back update are kept out of training with the reason, and the log, `/v1/status`
        (`guard`) and the UI say why in plain words. The step still takes its number: the kept weights serve
        under it (lineage parent: the version kept, 0 updates). Logged per update: `guard/held`, `guard/kl`,
        `guard/implausible`, `guard/entropy_gap`, `guard/seconds`. Cost: one forward over a few rows of at
        most 256 prompt and 24 reply tokens (`benchmarks/guard_bench.py`). Needs a LoRA adapter
        (the base is the reference): with full fine-tuning set `guard: false`.
    guard_recent_prompts (`int`, defaults to `3`):
        The person's most recent main turns (distinct prompts, a reply of 8 tokens or more, private sessions
        left out) the guard compares on, their replies cut to 24 tokens and their prompts to the last 256.
    guard_neutral_prompts (`list[str]` or `None`, defaults to `None`):
        User messages that ask for nothing in particular (one base reply each, at most 24 tokens, sampled once
        per run); `None`: "Hi! What can you do?" and "Tell me something interesting."; `[]`: none.
    guard_max_kl (`float`, defaults to `0.5`):
        The most KL(new || reference) per token (nats) a version may show on any one row.
    guard_max_implausible (`float`, defaults to `0.01`):
        The most probability mass a version may move, at any one reply position, onto tokens the reference finds
        implausible there (below 1 in 8,000): the first sign of answers starting to break. Measured on the toy
        model; on a real model, read `guard/implausible` over the first updates and raise it if healthy
        versions are held back.
    guard_max_entropy_drop (`float`, defaults to `1.0`), guard_max_entropy_rise (`float`, defaults to `1.0`):
        How far (nats per token) the entropy gap may fall below 0 (answers collapsing onto a few strings) or
        rise above it (answers falling apart).

    > TRL fields that do not apply

    A live turn is sampled by the serving engine, has one completion and one judged reward, so the TRL fields
    of generation, reward aggregation, completion logging and the dataset (`use_vllm`, `vllm_mode`,
    `generation_kwargs`, `top_p`, `top_k`, `min_p`, `repetition_penalty`, `reward_weights`,
    `shuffle_dataset`, `sync_ref_model`, `log_completions`, ...) are refused when set to anything but the
    value that matches this behaviour, with an error that says what to use instead (`num_generations`:
    use `best_of_n`). The batch geometry (`generation_batch_size`, `steps_per_generation`,
    `gradient_accumulation_steps`) is derived from `batch_size` and refused when set. So that the defaults
    say what runs, `shuffle_dataset` defaults to `False` here. TRL's loss fields (`delta`, `importance_sampling_level`,
    `top_entropy_quantile`, `off_policy_mask_threshold`, ...) apply as in TRL; the off-policy mask compares
    with the engine's stored sampling log-probs.

    > TRL fields with other defaults here

    learning_rate (`float`, defaults to `1e-5`), lr_scheduler_type (`str`, defaults to `"constant"`):
        Online learning takes a few samples per update for as long as people talk to it: a constant rate.
    per_device_train_batch_size (`int`, defaults to `4`):
        Micro-batch size: an update's `batch_size` samples are processed in micro-batches of this size.
    max_completion_length (`int`, defaults to `1024`):
        Most tokens of a served reply: a request's `max_tokens` defaults to `min(512, max_completion_length)`
        and is capped at it.
    logging_steps (`int`, defaults to `1`), save_steps (`int`, defaults to `1`):
        Every update is logged and checkpointed (what `adapter_history` needs).
    num_generations (`int`, defaults to `1`), shuffle_dataset (`bool`, defaults to `False`):
        One completion per live turn; samples are trained oldest first.
    gradient_checkpointing (`bool` or `None`, defaults to `None`):
        The older name of `activation_checkpointing`.

    > Parameters that control metric logging

    report_to (`str` or `list[str]`, defaults to `"none"`), project (`str`, defaults to `"openclaw-trl"`),
    run_name (`str`, defaults to the last part of `output_dir`):
        The trackers of `TrainingArguments`, fed every update's metrics. `report_to: trackio` (TRL's
        local-first tracker, the `trackio` package) writes them to a local SQLite database in
        `$TRACKIO_DIR` (Trackio's own variable; default `$HF_HOME/trackio`), project `project`, run
        `run_name`, and needs no network: nothing goes to the Hub unless `trackio_space_id` names a Space.
        A restarted run logs on to the same Trackio run. `trackio show --project openclaw-trl` opens the
        dashboard. Without the `trackio` package installed, `report_to: trackio` is refused. `tensorboard`
        and `wandb` work as in TRL. Whatever the trackers, every logged metrics dict is also appended, one
        JSON object per line with its `step` and Unix `time`, to `<output_dir>/metrics.jsonl` (kept across
        restarts; `logging_steps` says how often).
    log_level (`str`, defaults to `"passive"`):
        What the terminal shows (TrainingArguments' field). `passive`: the served URL, what starting up does,
        one line per update (`update 3 from 2 ratings (👍 1, 👎 1) · mean reward +0.00 · now serving v3`), a
        rollback or a resume, and the warnings and errors of every library (a repeated Python warning is shown
        once). `info` adds the INFO messages of the libraries (transformers, one uvicorn line per HTTP
        request, ...) and their progress bars; `debug` adds everything. `warning`, `error` and `critical`
        show only messages of that level or above (no update lines).
    disable_tqdm (`bool`, defaults to `True`):
        Always true: live learning runs until it is stopped, so transformers' progress bar towards
        `max_steps` (a billion when unset) would have no end; `false` is refused.

    > Parameters that bound requests and work

    Every request field that can grow has a limit; a request over one is refused with a 400 (a 413 for the
    body size) OpenAI-style error that names the limit and its value, and nothing of it is stored.

    max_request_bytes (`int`, defaults to `4194304`):
        Raw body size (4 MiB): holds the largest conversation the text limits allow, with JSON escaping.
    max_messages (`int`, defaults to `256`):
        Messages per request, far beyond any real chat.
    max_message_chars (`int`, defaults to `100000`), max_total_chars (`int`, defaults to `400000`):
        Text of one message (content, reasoning and tool-call arguments) and of all messages together;
        100,000 characters are ~25k tokens, more than the served context.
    max_tools (`int`, defaults to `64`), max_tools_chars (`int`, defaults to `65536`):
        Tool definitions per request and their JSON size (they are rendered into every prompt).
    max_stop (`int`, defaults to `4`), max_stop_chars (`int`, defaults to `64`):
        Stop strings per request (OpenAI's limit) and the length of each (checked after every token).
    max_session_id_chars (`int`, defaults to `128`):
        Length of a session id, which may only use letters, digits and `._:@+=/~-` (it is echoed in the
        `x-openclaw-session-id` response header).
    max_feedback_chars (`int`, defaults to `8000`):
        Correction text of one feedback (API or UI); it becomes a judge's next state and a hint.
    max_context_len (`int` or `None`, defaults to `None`):
        Prompt + reply tokens of one request. `None`: the model's own context (`max_position_embeddings`
        of its config, e.g. 40,960 for Qwen3; with `engine: vllm_server` the servers' `max_model_len`); a
        set value is lowered to the model's when that is smaller. Agents send long prompts (OpenClaw's
        first turn is ~10k tokens: a ~40,000-character system prompt and a dozen tools), so keep it well
        above that. With `engine: vllm` it is also vLLM's `max_model_len` unless `vllm_max_model_length`
        is set.
    min_reply_tokens (`int`, defaults to `256`):
        The least room a prompt must leave for the reply: a prompt leaving less than
        `min(min_reply_tokens, max_tokens, half the context)` is refused with `code: context_length_exceeded` (agents then
        compact their history) instead of being answered with a reply cut after a few tokens; otherwise the
        request's `max_tokens` is clamped to the room left.
    max_prompt_tokens (`int` or `None`, defaults to `None`):
        Prompt tokens after rendering the chat template; `None`: what the context leaves
        (`max_context_len − min_reply_tokens` at most).
    max_judge_prompt_tokens (`int`, defaults to `4096`):
        Tokens of one engine judge prompt. A longer one is fitted by cutting the next-state text (then the
        response) in the middle, keeping its head and tail around a `[… N characters cut …]` marker; a
        prompt the fixed instructions alone overflow gets no vote (`judge_prompt_too_long`).
    max_hint_chars (`int`, defaults to `2000`):
        Length of a hint added to the teacher prompt (a longer one keeps its first `max_hint_chars`
        characters), so the teacher scores at most the served prompt + this hint + the completion.

    One temperature: turns that can be trained on (main turns of trainable, non-private sessions) are
    sampled at `temperature` (a `GRPOConfig` field) whatever the request asks, so the sampling log-probs,
    the teacher's and the trainer's are at the same temperature and a trainable turn is never greedy; the
    request's temperature applies only to turns that are never trained on (side turns, anonymous and
    private sessions). Replies report the temperature used (`openclaw.temperature`). A turn recorded
    greedily (temperature 0) is judged but never becomes a sample. With `engine: vllm` and an OPD term
    `temperature` must be 1.0: vLLM's prompt log-probs (the teacher) are at T = 1.
    """

    # Learning method
    method: str = field(
        default=JudgeConfig.method, metadata={"help": "rl, opd or combine.", "choices": METHODS}
    )
    w_rl: float = field(default=1.0, metadata={"help": "Weight of the Binary-RL reward term."})
    w_opd: float = field(default=1.0, metadata={"help": "Weight of the OPD term."})
    batch_size: int = field(default=16, metadata={"help": "Judged samples consumed per update."})
    teacher: str = field(default=JudgeConfig.teacher, metadata={"help": "Teacher weights: base or policy."})
    # Which samples are trained on
    max_staleness: int | None = field(
        default=None, metadata={"help": "Drop samples sampled more than this many policy versions ago."}
    )
    max_samples_waiting: int = field(
        default=4096,
        metadata={"help": "The most samples waiting for an update; the oldest beyond are dropped."},
    )
    prm_monitor: bool = field(
        default=False, metadata={"help": "opd: also run the PRM votes and log their mean (not trained on)."}
    )
    # Top-K distillation
    w_kd: float = field(default=0.0, metadata={"help": "Weight of the top-K distillation loss (0 = off)."})
    kd_topk: int = field(default=20, metadata={"help": "K of the top-K distillation."})
    kd_topk_source: str = field(default="teacher", metadata={"help": "teacher or student top-K support."})
    kd_cap: float = field(default=10.0, metadata={"help": "Per-token cap of the KD term."})
    # Session baseline and staged distillation
    advantage_baseline: str = field(
        default="none", metadata={"help": "none, session_mean or batch_mean.", "choices": ADVANTAGE_BASELINES}
    )
    opd_kd_schedule: str = field(
        default="constant", metadata={"help": "constant, switch or ramp.", "choices": OPD_KD_SCHEDULES}
    )
    opd_kd_schedule_steps: list[int] | None = field(
        default=None, metadata={"help": "[start, end] optimizer steps of the OPD -> KD schedule."}
    )
    # Best-of-N serving
    best_of_n: int = field(default=1, metadata={"help": "Candidates per trainable turn (1 = off, <= 16)."})
    best_of_n_explore: float = field(
        default=QuickJudgeConfig.explore,
        metadata={"help": "Chance of serving a random candidate instead of the best (0-1)."},
    )
    quick_judge_backend: str = field(
        default=QuickJudgeConfig.backend,
        metadata={"help": "Best-of-N scorer: engine, openai, callable or memory."},
    )
    quick_judge_callable: str | None = field(
        default=QuickJudgeConfig.callable, metadata={"help": "callable quick judge: module:function."}
    )
    quick_judge_hints: int = field(
        default=QuickJudgeConfig.hints, metadata={"help": "memory quick judge: recent hints weighed (1-16)."}
    )
    group_std_floor: float = field(
        default=0.0,
        metadata={
            "help": "Best-of-N: smallest std a group's scores are divided by (scale_rewards group/batch)."
        },
    )
    group_entropy_coef: float = field(
        default=0.0,
        metadata={"help": "Best-of-N: group reward = score - coef * log pi(candidate) (0: the score)."},
    )
    # Judges
    judge_backend: str = field(
        default=JudgeConfig.backend, metadata={"help": "engine, openai, callable or feedback."}
    )
    judge_m: int = field(default=JudgeConfig.m, metadata={"help": "Votes per judged turn."})
    judge_temperature: float = field(
        default=JudgeConfig.temperature, metadata={"help": "Judge sampling temperature."}
    )
    judge_top_p: float = field(default=JudgeConfig.top_p, metadata={"help": "Judge top-p."})
    judge_max_tokens: int = field(default=JudgeConfig.max_tokens, metadata={"help": "Judge max new tokens."})
    judge_openai_base_url: str | None = field(
        default=JudgeConfig.openai_base_url, metadata={"help": "openai backend base URL."}
    )
    judge_openai_model: str | None = field(
        default=JudgeConfig.openai_model, metadata={"help": "openai backend model."}
    )
    judge_openai_api_key_env: str = field(
        default=JudgeConfig.openai_api_key_env, metadata={"help": "Env var with the key."}
    )
    judge_callable: str | None = field(
        default=JudgeConfig.callable, metadata={"help": "callable backend: module:function."}
    )
    judge_max_concurrency: int = field(
        default=JudgeConfig.max_concurrency, metadata={"help": "Concurrent judge calls."}
    )
    judge_timeout_s: float = field(
        default=JudgeConfig.timeout_s, metadata={"help": "Per-vote timeout in seconds."}
    )
    judge_max_attempts: int = field(
        default=JudgeConfig.max_attempts,
        metadata={"help": "Failed judging attempts before a turn is set aside as failed."},
    )
    # Engine
    engine: str = field(default="hf", metadata={"help": "hf, vllm or vllm_server.", "choices": ENGINES})
    engine_max_batch_size: int = field(default=16, metadata={"help": "Requests per generation pass (hf)."})
    prefix_cache_mb: int = field(
        default=DEFAULT_PREFIX_CACHE_MB,
        metadata={"help": "MiB of the hf engine's prompt KV cache (0 = off)."},
    )
    vllm_server_urls: list[str] = field(
        default_factory=list, metadata={"help": "vllm_server: roots of the vLLM servers (http://host:port)."}
    )
    vllm_server_api_key_env: str | None = field(
        default=None, metadata={"help": "vllm_server: env var holding the servers' bearer key."}
    )
    vllm_server_adapter_dir: str | None = field(
        default=None, metadata={"help": "vllm_server: adapter versions dir every server reads."}
    )
    vllm_server_request_timeout: float = field(
        default=120.0, metadata={"help": "vllm_server: seconds before a silent server is out of rotation."}
    )
    vllm_server_max_learn_requests: int = field(
        default=4, metadata={"help": "vllm_server: judge/teacher requests in flight per server."}
    )
    # Serving and sources
    source: str = field(default="live", metadata={"help": "live, replay or simulated."})
    replay_path: str | None = field(default=None, metadata={"help": "JSONL / datasets file for replay."})
    simulated_user: str = field(
        default="openclaw_trl.simulation:PreferenceUser",
        metadata={"help": "module:Class of the simulated user."},
    )
    simulated_sessions: int = field(
        default=0, metadata={"help": "Conversations to simulate (0 = until max_steps)."}
    )
    host: str = field(default=ServerSettings.host, metadata={"help": "Bind address of the UI/API."})
    port: int = field(default=ServerSettings.port, metadata={"help": "Port of the UI/API."})
    api_key_env: str | None = field(
        default=ServerSettings.api_key_env, metadata={"help": "Env var holding the API bearer token."}
    )
    served_model_name: str = field(default="openclaw", metadata={"help": "Model name reported by the API."})
    users: list[str] | None = field(
        default=None,
        metadata={
            "help": "People who each teach an adapter of their own: name:API_KEY_ENV (YAML: mappings)."
        },
    )
    max_adapters: int | None = field(
        default=None,
        metadata={"help": "Users' adapters on the device at once (default: the users, at most 8)."},
    )
    session_idle_timeout: float = field(
        default=SessionConfig.session_idle_timeout, metadata={"help": "Seconds before an idle session ends."}
    )
    train_anonymous: bool = field(
        default=SessionConfig.train_anonymous,
        metadata={"help": "Train on conversations without a session id (recognised by their history)."},
    )
    correction_window_s: float = field(
        default=SessionConfig.correction_window_s,
        metadata={
            "help": "Seconds a bare 👎 waits for its correction before it is trained (0 = off, <= 600)."
        },
    )
    learn_unstored_responses: bool = field(
        default=True, metadata={"help": "Learn from Responses requests with store: false."}
    )
    store_path: str | None = field(default=None, metadata={"help": "SQLite store path."})
    # Where a run starts
    fresh_start: bool = field(
        default=False,
        metadata={"help": "Move the old run to output_dir/previous-<time>/ and start at step 0."},
    )
    # Adapter versions
    adapter_history: int = field(
        default=10, metadata={"help": "Published adapter versions kept restorable (0 = no history)."}
    )
    # The version guard
    guard: bool = field(
        default=GuardConfig.enabled, metadata={"help": "Check each version before serving it."}
    )
    guard_recent_prompts: int = field(
        default=GuardConfig.recent_prompts, metadata={"help": "Recent turns the guard compares versions on."}
    )
    guard_neutral_prompts: list[str] | None = field(
        default=None, metadata={"help": "Neutral prompts of the guard's comparison with the base."}
    )
    guard_max_kl: float = field(
        default=GuardConfig.max_kl,
        metadata={"help": "Most KL(new || reference) per token on any row."},
    )
    guard_max_implausible: float = field(
        default=GuardConfig.max_implausible,
        metadata={"help": "Most probability mass moved onto implausible tokens at any reply position."},
    )
    guard_max_entropy_drop: float = field(
        default=GuardConfig.max_entropy_drop,
        metadata={"help": "Most entropy fall from the base (nats/token)."},
    )
    guard_max_entropy_rise: float = field(
        default=GuardConfig.max_entropy_rise,
        metadata={"help": "Most entropy rise from the base (nats/token)."},
    )

    # Bounds on requests and work
    max_request_bytes: int = field(default=RequestLimits.max_request_bytes, metadata={"help": "Body bytes."})
    max_messages: int = field(default=RequestLimits.max_messages, metadata={"help": "Messages per request."})
    max_message_chars: int = field(
        default=RequestLimits.max_message_chars, metadata={"help": "Characters of one message."}
    )
    max_total_chars: int = field(
        default=RequestLimits.max_total_chars, metadata={"help": "Characters of all messages."}
    )
    max_tools: int = field(default=RequestLimits.max_tools, metadata={"help": "Tools per request."})
    max_tools_chars: int = field(default=RequestLimits.max_tools_chars, metadata={"help": "Tools JSON size."})
    max_stop: int = field(default=RequestLimits.max_stop, metadata={"help": "Stop strings per request."})
    max_stop_chars: int = field(
        default=RequestLimits.max_stop_chars, metadata={"help": "Stop string length."}
    )
    max_session_id_chars: int = field(
        default=RequestLimits.max_session_id_chars, metadata={"help": "Session id length."}
    )
    max_feedback_chars: int = field(
        default=RequestLimits.max_feedback_chars, metadata={"help": "Feedback text length."}
    )
    max_context_len: int | None = field(
        default=None, metadata={"help": "Prompt + reply tokens (null: the model's own context)."}
    )
    min_reply_tokens: int = field(
        default=256, metadata={"help": "Least room a prompt must leave for the reply."}
    )
    max_prompt_tokens: int | None = field(
        default=RequestLimits.max_prompt_tokens,
        metadata={"help": "Rendered prompt tokens (null: what the context leaves)."},
    )
    max_judge_prompt_tokens: int = field(
        default=JudgeConfig.max_prompt_tokens, metadata={"help": "Tokens of one engine judge prompt."}
    )
    max_hint_chars: int = field(
        default=JudgeConfig.max_hint_chars, metadata={"help": "Characters of a teacher hint."}
    )

    # TRL defaults we change (documented above).
    epsilon_high: float | None = field(
        default=None, metadata={"help": "Upper clip range: 0.28 (clip-higher), epsilon for method opd."}
    )
    scale_rewards: str = field(
        default="group", metadata={"help": "Best-of-N group advantages: group, batch or none (TRL's)."}
    )
    shuffle_dataset: bool | None = field(default=False, metadata={"help": "Samples train oldest first."})
    loss_type: str = field(
        default="dapo", metadata={"help": "TRL loss aggregation (dapo: every token alike)."}
    )
    vllm_importance_sampling_mode: str = field(
        default="token_truncate", metadata={"help": "Per-token truncated IS (chat turns vary in length)."}
    )
    num_generations: int | None = field(default=1, metadata={"help": "Always 1: one completion per turn."})
    learning_rate: float = field(default=1e-5, metadata={"help": "AdamW learning rate."})
    lr_scheduler_type: str = field(default="constant", metadata={"help": "Online learning: constant rate."})
    logging_steps: float = field(default=1, metadata={"help": "Log every update."})
    gradient_checkpointing: bool | None = field(
        default=None, metadata={"help": "Deprecated alias (transformers 5)."}
    )
    activation_checkpointing: bool | None = field(
        default=False, metadata={"help": "Trade compute for memory."}
    )
    max_completion_length: int | None = field(default=1024, metadata={"help": "Max new tokens when serving."})
    per_device_train_batch_size: int = field(default=4, metadata={"help": "Micro-batch size of an update."})
    save_steps: float = field(
        default=1, metadata={"help": "Checkpoint every N updates (1 with adapter_history > 0)."}
    )
    project: str = field(default="openclaw-trl", metadata={"help": "Tracker project (trackio)."})
    disable_tqdm: bool | None = field(
        default=True, metadata={"help": "Always true: one log line per update instead of a progress bar."}
    )

    def __post_init__(self):
        check_openclaw_fields(self)
        check_users(self)
        refuse_inapplicable_trl_fields(self)
        refuse_fields_of_the_other_engine(self)
        check_vllm_server_fields(self)
        if self.epsilon_high is None:
            self.epsilon_high = self.epsilon if self.method == "opd" else 0.28
        if self.method == "rl":
            self.w_opd = 0.0
        elif self.method == "opd":
            self.w_rl = 0.0
        set_live_training_defaults(self)
        # TRL's _BaseConfig / TrainingArguments validation, skipping GRPOConfig's group checks (see module doc).
        super(GRPOConfig, self).__post_init__()
        derive_batch_geometry(self)
        check_importance_sampling_clip(self)
        check_trackers(self)
        check_adapter_history(self)
        self.guard_config()  # its checks, with the field names in the message
        if self.store_path is None:
            self.store_path = f"{self.output_dir}/openclaw.sqlite"

    @property
    def user_specs(self):
        """The recipe's ``users`` as ``users.UserSpec``s (empty: one implicit user)."""
        from openclaw_trl.users import parse_users

        return parse_users(self.users)

    def quick_judge_config(self) -> QuickJudgeConfig:
        """The Best-of-N quick judge fields as ``QuickJudgeConfig`` (its endpoint is the judges' openai one)."""
        return QuickJudgeConfig(
            backend=self.quick_judge_backend,
            callable=self.quick_judge_callable,
            openai_base_url=self.judge_openai_base_url,
            openai_model=self.judge_openai_model,
            openai_api_key_env=self.judge_openai_api_key_env,
            timeout_s=self.judge_timeout_s,
            max_concurrency=self.judge_max_concurrency,
            max_prompt_tokens=self.max_judge_prompt_tokens,
            explore=self.best_of_n_explore,
            hints=self.quick_judge_hints,
            teacher=self.teacher,
            entropy_coef=self.group_entropy_coef,
        )

    def guard_config(self) -> GuardConfig:
        """The version guard fields as the trainer's ``GuardConfig``."""
        neutral = NEUTRAL_PROMPTS if self.guard_neutral_prompts is None else tuple(self.guard_neutral_prompts)
        return GuardConfig(
            enabled=self.guard,
            recent_prompts=self.guard_recent_prompts,
            neutral_prompts=neutral,
            max_new_tokens=min(
                GuardConfig.max_new_tokens, self.max_completion_length or GuardConfig.max_new_tokens
            ),
            max_kl=self.guard_max_kl,
            max_implausible=self.guard_max_implausible,
            max_entropy_drop=self.guard_max_entropy_drop,
            max_entropy_rise=self.guard_max_entropy_rise,
            seed=self.seed,
        )

    def request_limits(self) -> RequestLimits:
        """The request limit fields as the server's ``RequestLimits``."""
        return RequestLimits(**{f.name: getattr(self, f.name) for f in dataclasses.fields(RequestLimits)})

    def judge_config(self) -> JudgeConfig:
        """The judge fields as the scorer's ``JudgeConfig``."""
        return JudgeConfig(
            method=self.method,
            backend=self.judge_backend,
            m=self.judge_m,
            temperature=self.judge_temperature,
            top_p=self.judge_top_p,
            max_tokens=self.judge_max_tokens,
            openai_base_url=self.judge_openai_base_url,
            openai_model=self.judge_openai_model,
            openai_api_key_env=self.judge_openai_api_key_env,
            callable=self.judge_callable,
            teacher=self.teacher,
            # The engine returns the teacher's top-K only when it is the support (student: the trainer picks it).
            kd_topk=self.kd_topk if self.w_kd > 0 and self.kd_topk_source == "teacher" else 0,
            max_concurrency=self.judge_max_concurrency,
            timeout_s=self.judge_timeout_s,
            max_attempts=self.judge_max_attempts,
            max_prompt_tokens=self.max_judge_prompt_tokens,
            max_hint_chars=self.max_hint_chars,
            prm_monitor=self.prm_monitor,
            every_judged_turn=self.advantage_baseline != "none",
        )

    def session_config(self) -> SessionConfig:
        """The session fields as the collector's ``SessionConfig``."""
        return SessionConfig(
            session_idle_timeout=self.session_idle_timeout,
            train_anonymous=self.train_anonymous,
            correction_window_s=self.correction_window_s,
        )

    def server_settings(
        self, port: int | None = None, ui: bool = True, model_id: str | None = None
    ) -> ServerSettings:
        """The serving fields as ``ServerSettings``; ``port`` overrides the recipe's (0: a free port);
        ``model_id`` is the served model's id (the UI's header names it).

        Trainable turns are sampled at ``temperature``, which is also the default of the other turns; a
        request's ``max_tokens`` defaults to ``min(512, max_completion_length)`` and is capped at
        ``max_completion_length``.
        """
        return ServerSettings(
            host=self.host,
            port=self.port if port is None else port,
            model_names=[self.served_model_name],
            api_key_env=self.api_key_env,
            default_temperature=self.temperature,
            train_temperature=self.temperature,
            max_context_len=self.max_context_len,
            min_reply_tokens=self.min_reply_tokens,
            learn_unstored_responses=self.learn_unstored_responses,
            default_max_tokens=min(512, self.max_completion_length or 512),
            max_tokens_cap=max(self.max_completion_length or 512, 1),
            limits=self.request_limits(),
            ui=ui,
            model_id=model_id,
        )

    def engine_kwargs(self, lora_config=None, dtype: str | None = None) -> dict:
        """Keyword arguments of the ``engine``'s constructor (``create_engine(self.engine, path, **kwargs)``).

        ``lora_config`` is the PEFT ``LoraConfig`` of the adapter and ``dtype`` the recipe's weight dtype
        (``None`` or ``"auto"``: the engine's default, float32 on CPU). vLLM's ``max_model_len`` is
        ``vllm_max_model_length``, else ``max_context_len``; with both None vLLM uses the model's own context.
        """
        dtype = None if dtype == "auto" else dtype
        if self.engine == "vllm_server":  # the servers load the weights in their own dtype
            return {
                "urls": list(self.vllm_server_urls),
                "api_key_env": self.vllm_server_api_key_env,
                "lora_config": lora_config,
                "adapter_dir": self.vllm_server_adapter_dir or f"{self.output_dir}/served_adapters",
                "request_timeout": self.vllm_server_request_timeout,
                "startup_timeout": self.vllm_server_timeout,
                "max_learn_requests": self.vllm_server_max_learn_requests,
                **({"max_adapters": self.max_adapters} if self.users else {}),
            }
        if self.engine == "hf":
            return {
                "lora_config": lora_config,
                "dtype": dtype,
                "max_batch_size": self.engine_max_batch_size,
                "prefix_cache_mb": self.prefix_cache_mb,
                **({"max_adapters": self.max_adapters} if self.users else {}),
            }
        kwargs = {
            "lora_config": lora_config,
            "dtype": dtype,
            "gpu_memory_utilization": self.vllm_gpu_memory_utilization,
            "enable_sleep_mode": self.vllm_enable_sleep_mode,
            "max_logprobs": max(20, self.kd_topk),
            **({"max_adapters": self.max_adapters} if self.users else {}),
        }
        if (self.vllm_max_model_length or self.max_context_len) is not None:
            kwargs["max_model_len"] = self.vllm_max_model_length or self.max_context_len
        return kwargs
