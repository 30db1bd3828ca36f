"""serve's run-api client: its own calls (the check before every group, registration, the scored
groups) share one keep-alive connection; a client per call built a TLS context each time (half of
serve's CPU). A large scored group's body is built off the event loop and reaches the real run-api;
an HTTP error status is told apart from a run-api that does not answer."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
from collections import Counter
from types import SimpleNamespace

import httpx

from environments.atropos_runtime import serve_api
from environments.atropos_runtime.serve_api import RunApiClient
from tests.integration.test_modes_on_vllm import register_trainer


class CountingServer:
    """A loopback HTTP/1.1 server answering every request `{"status": "success"}` (200 unless told) on keep-alive
    connections, counting the connections it accepted and the requests it read."""

    def __init__(self, scored_statuses: tuple[int, ...] = (), other_status: bytes = b"200 OK") -> None:
        self.other_status = other_status  # the answer to every other request
        self.connections = 0
        self.requests = 0
        self.scored_statuses = list(scored_statuses)  # the answers to scored-data posts, in turn
        self.scored: list[tuple[bytes, bytes]] = []  # (request head, body) of each scored-data post

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        body = b'{"status": "success"}'
        reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                fields = (line.partition(b":") for line in head.split(b"\r\n"))
                data = await reader.readexactly(
                    next((int(v) for k, _, v in fields if k.lower() == b"content-length"), 0)
                )
                self.requests += 1
                status = self.other_status
                if b" /scored_data" in head.split(b"\r\n")[0]:
                    self.scored.append((head, data))
                    if self.scored_statuses:
                        status = b"%d Scripted" % self.scored_statuses.pop(0)
                writer.write(reply.replace(b"200 OK", status) % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()  # the client closed its connection


def client_for(url: str) -> RunApiClient:
    env = RunApiClient()
    env.config = SimpleNamespace(
        rollout_server_url=url,
        max_token_length=2048,
        wandb_name="t",
        inference_weight=1.0,
        min_batch_allocation=None,
        group_size=4,
    )
    env.env_id = 0
    env.drops = Counter()
    env._outage = None
    return env


def group(n: int, tokens: int, seed: int) -> dict:
    """A scored group as atroposlib's `ScoredDataGroup` (its JSON form; the optional fields left to run-api's defaults)."""
    seqs = [[(seed * 7919 + i * 31 + t) % 2048 for t in range(tokens)] for i in range(n)]
    return {
        "tokens": seqs,
        "masks": [[-100] * 4 + s[4:] for s in seqs],
        "scores": [1.0 if i % 2 else -1.0 for i in range(n)],
        "inference_logprobs": [[1.0] * 4 + [-0.5] * (tokens - 4) for _ in range(n)],
    }


async def test_run_api_calls_share_one_keep_alive_connection():
    server = CountingServer()
    async with server as url:
        env = client_for(url)
        assert await env._post_register() == {"status": "success"}
        assert all([await env._env_known() for _ in range(5)])
        assert (server.requests, server.connections) == (6, 1)
        await env.close_run_api_http()
        assert env._api_http is None
        assert await env._env_known()  # a new client after close, on a new connection
        assert (server.requests, server.connections) == (7, 2)
        await env.close_run_api_http()


async def test_scored_groups_reach_the_real_run_api_gzipped_and_encoded_off_the_loop(run_api, monkeypatch):
    register_trainer(run_api, batch_size=8, max_token_len=4096)
    encoded_on: list[bool] = []
    encode = serve_api.encode_scored

    def spy(payload):
        encoded_on.append(threading.current_thread() is threading.main_thread())
        return encode(payload)

    monkeypatch.setattr(serve_api, "encode_scored", spy)
    env = client_for(run_api)
    env.env_id = (await env._post_register())["env_id"]
    one, listed = group(4, 2500, seed=1), group(4, 2500, seed=2)  # over INLINE_TOKENS: to a thread
    await env._send_scored_data_to_api(one)
    await env._send_scored_data_to_api([listed])
    await env.close_run_api_http()
    assert encoded_on == [False, False]  # JSON and gzip ran in a worker thread, not on the loop
    batch = (await asyncio.to_thread(httpx.get, run_api + "/batch", timeout=10)).json()["batch"]
    assert batch is not None and len(batch) == 2, batch
    sent = {json.dumps(g["tokens"]) for g in (one, listed)}
    assert {json.dumps(g["tokens"]) for g in batch} == sent
    assert all(g["env_id"] == env.env_id for g in batch)


def test_the_body_means_exactly_what_json_dumps_means():
    odd = {
        "tokens": [[1, 2], [], [3]],
        "scores": [0.5, float("nan"), -1e300],
        "messages": [[{"role": "user", "content": 'é\u2028"x"'}], []],
        "int_keys": {1: [2], 3: {"a": None}},
        "mixed": [[1], 2, {"b": [True, False]}],
        "empty": {},
        "none": None,
        "nested": {"x": [[[1, 2], [3]], [[4]]]},
        "logprobs": [[-0.5, float("-inf")]],
    }
    for value in (odd, [odd, group(2, 3, seed=1)], [], [[]], group(4, 50, seed=2), "s", 7):
        body, headers = serve_api.encode_scored(value)
        text = gzip.decompress(body) if headers.get("Content-Encoding") == "gzip" else body
        assert json.dumps(json.loads(text)) == json.dumps(json.loads(json.dumps(value))), value


def test_a_scored_body_is_atroposlibs_json_gzipped_from_one_kib():
    small, small_headers = serve_api.encode_scored({"tokens": [[1, 2, 3]]})
    assert json.loads(small) == {"tokens": [[1, 2, 3]]} and "Content-Encoding" not in small_headers
    big = group(4, 500, seed=3)
    body, headers = serve_api.encode_scored(big)
    assert headers == {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    assert json.loads(gzip.decompress(body)) == big


async def test_a_5xx_is_tried_again_and_a_4xx_is_counted_as_a_drop():
    server = CountingServer(scored_statuses=(503, 200, 422, 503, 503, 503))
    async with server as url:
        env = client_for(url)
        await env._send_scored_data_to_api(group(2, 400, seed=4))  # 503 then 200: sent
        assert len(server.scored) == 2 and server.scored[0][1] == server.scored[1][1]
        assert b"content-encoding: gzip" in server.scored[0][0].lower()
        await env._send_scored_data_to_api(group(2, 400, seed=5))  # 422: not tried again
        assert len(server.scored) == 3 and env.drops == Counter({"run-api refused (422)": 1})
        try:
            await env._send_scored_data_to_api(group(2, 400, seed=6))
        except serve_api.RunApiServerError as exc:
            assert "503" in str(exc)
        else:
            raise AssertionError("three 5xx answers must raise")
        assert len(server.scored) == 6  # three attempts in all
        await env.close_run_api_http()


async def test_status_polls_of_the_real_run_api_set_what_upstreams_get_status_sets(run_api):
    register_trainer(run_api, batch_size=8)
    env = client_for(run_api)
    env.config.max_num_workers, env.config.max_num_workers_per_node, env.config.status_every_s = -1, 3, 30
    weights: list[float] = []

    async def update_weight(weight: float) -> None:
        weights.append(weight)

    env.server = SimpleNamespace(servers=[object(), object()], update_weight=update_weight)
    env.env_id = (await env._post_register())["env_id"]
    for _ in range(3):
        await env.get_status()
    client = env._api_http
    await env.close_run_api_http()
    assert env.status_dict["current_step"] == 0 and "queue_size" in env.status_dict
    assert env.max_num_workers == 6  # -1: per node x servers, as upstream computes it
    assert len(weights) == 3 and weights[0] == env.status_dict["env_weight"]
    assert client is not None and client.closed  # the polls ran on the one keep-alive session


async def test_an_error_status_is_not_an_outage_and_a_status_poll_says_which():
    server = CountingServer(other_status=b"404 Not Found")
    async with server as url:
        env = client_for(url)
        env.config.status_every_s = 30
        try:
            await env.get_status()
        except serve_api.RunApiStatusError as exc:
            assert exc.status == 404 and "success" in str(exc)  # the status and the start of the body
        else:
            raise AssertionError("a 404 to /status-env must raise, not be waited out")
        assert not await env._env_known()
        await env.close_run_api_http()
