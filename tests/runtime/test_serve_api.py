"""serve's run-api client: its own calls (the check before every group, registration) share one
keep-alive connection; a client per call built a TLS context each time (half of serve's CPU)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from environments.serve_api import RunApiClient


class CountingServer:
    """A loopback HTTP/1.1 server answering every request 200 `{"status": "success"}` on keep-alive
    connections, counting the connections it accepted and the requests it read."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0

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
                await reader.readexactly(
                    next((int(v) for k, _, v in fields if k.lower() == b"content-length"), 0)
                )
                self.requests += 1
                writer.write(reply % (len(body), body))
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
    return env


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
