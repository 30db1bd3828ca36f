"""serve's side of the conversation with run-api (atroposlib's trajectory API), made explicit.

`RunApiClient` is mixed into `RubricEnv` before atroposlib's `BaseEnv` and overrides four of its
serve-mode methods (nothing in atroposlib is patched):

* `register_env`: run-api not answering → one line "not answering (...); waiting for it to start";
  run-api up but no trainer started → one line saying so and what it waits for (a trainer's
  `POST /register` and first `GET /batch`), repeated every `status_every_s`; both give up after
  `trainer_wait_s`.
* `get_status`: a run-api outage pauses rollouts with one line (not atroposlib's RetryError); a
  restarted run-api that no longer knows the env (HTTP 5xx) is registered with again. It polls on
  the keep-alive session (upstream opened a session and a connection on every serve-loop pass).
* `_send_scored_data_to_api`: a scored group is held through an outage, and sent only when run-api
  knows this env (a group posted to a restarted run-api before its trainer registers would break
  run-api's state: docs/atropos.md, "ordering trap"). The body is atroposlib's (JSON through
  `fast_json`, gzip from 1 KiB) at gzip level 1, built off the event loop for large groups, and
  posted on the keep-alive aiohttp session: upstream's level 9 on the loop took ~0.4 s for a
  16 x 4k-token group, stalling every rollout.
* `env_step_checks`: stops serve when the inference watcher says so (`on_server_down=stop`) and
  logs one summary line every `status_every_s`; `quiet_atroposlib` keeps atroposlib's per-loop
  lines (~15/s) out unless `--env.verbose`.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import math
import time
from typing import TYPE_CHECKING, Any

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from environments.atropos_runtime import fast_json
from environments.atropos_runtime.server_health import (
    Outage,
    call_until_back,
    describe,
    is_connect_error,
    unwrap,
)
from environments.atropos_runtime.tls import verify_for

if TYPE_CHECKING:
    import aiohttp  # imported where a session is made: ~150 ms of every start otherwise (lazy_imports)

log = logging.getLogger("rlvr")
# what a run-api outage means for the env, whichever caller (status poll or a send) finds it first
RUN_API_WAITS_FOR = "rollouts pause until it is back (scored groups are held, not dropped)"
# run-api answers its small calls at once: 5 s without a connection or a byte of the answer is a hung
# server; a scored group's POST gets SCORED_POST_TIMEOUT_S in all (see _post_scored)
RUN_API_TIMEOUT_S = 5.0
SCORED_POST_TIMEOUT_S = 300.0
STATUS_FRESH_S = 0.5  # a status poll this recent stands for "run-api knows this env" (see the send)


class RunApiClient:
    """Mixin for `RubricEnv` (see module docstring); expects BaseEnv's attributes and RubricEnv's
    `config`, `watcher`, `drops`, `groups_ok`, `inflight`, `_outage` and `_last_summary`."""

    config: Any
    server: Any
    watcher: Any
    env_id: Any
    drops: Any
    groups_ok: int
    hopeless: str
    _outage: Outage | None
    _last_summary: float
    _api_http: aiohttp.ClientSession | None = None
    _api_http_loop: asyncio.AbstractEventLoop | None = None
    _status_ok_at: float = -math.inf  # when a status poll last found this env known to run-api
    sent_since_status: int = 0  # groups posted since the last status poll was asked (serve_loop)

    def _run_api_http(self) -> aiohttp.ClientSession:
        """One keep-alive aiohttp session for this env's own run-api calls (on the running loop).
        A client per call built a TLS context each time (half of serve's CPU, with a check before
        every group); httpx's keep-alive client still cost ~3x aiohttp's CPU per scored group, a
        third of serve's env CPU (`benchmarks/env_overhead_bench.py`)."""
        loop = asyncio.get_running_loop()
        if self._api_http is None or self._api_http.closed or self._api_http_loop is not loop:
            import aiohttp

            url = self.config.rollout_server_url
            self._api_http = aiohttp.ClientSession(  # a hung run-api is found in seconds, as a hung vLLM is
                timeout=aiohttp.ClientTimeout(
                    total=None, connect=RUN_API_TIMEOUT_S, sock_read=RUN_API_TIMEOUT_S
                ),
                connector=aiohttp.TCPConnector(ssl=verify_for(url, trust_env=False)),
            )
            self._api_http_loop = loop
        return self._api_http

    async def _api_call(
        self, method: str, path: str, *, body: Any = None, timeout: float | None = None
    ) -> tuple[int, bytes]:
        """(status, body) of one run-api call; `body` is sent as JSON. Connection failures and
        timeouts raise (aiohttp's errors, `asyncio.TimeoutError`), an HTTP error status does not."""
        import aiohttp

        data = None if body is None else fast_json.dumps(body)
        # no `timeout` argument keeps the session's 5 s limits (aiohttp reads timeout=None as "none")
        limits = {} if timeout is None else {"timeout": aiohttp.ClientTimeout(total=timeout)}
        async with self._run_api_http().request(
            method,
            f"{self.config.rollout_server_url}/{path}",
            data=data,
            headers=JSON_HEADERS if data is not None else None,
            **limits,
        ) as resp:
            return resp.status, await resp.read()

    async def close_run_api_http(self) -> None:
        if self._api_http is not None and self._api_http_loop is asyncio.get_running_loop():
            await self._api_http.close()
        self._api_http = None

    def _api_outage(self) -> Outage:
        if self._outage is None:
            self._outage = Outage(
                "run-api (the trajectory API)", self.config.rollout_server_url, self.config.status_every_s
            )
        return self._outage

    async def _post_register(self) -> dict[str, Any]:
        body = {
            "max_token_length": self.config.max_token_length,
            "desired_name": self.config.wandb_name,
            "weight": self.config.inference_weight,
            "min_batch_allocation": self.config.min_batch_allocation,
            "group_size": self.config.group_size,
        }
        status, raw = await self._api_call("POST", "register-env", body=body)
        if status >= 400:
            raise RunApiStatusError(status, "/register-env", raw)
        return fast_json.loads(raw)

    async def register_env(self) -> None:
        """Register with run-api, saying what is wrong and what it waits for: run-api not answering
        (waits for it to start), or no trainer registered yet (waits for one); both give up after
        `trainer_wait_s`."""
        wait_s = self.config.trainer_wait_s
        url = self.config.rollout_server_url
        deadline = time.monotonic() + wait_s
        announced = 0.0
        while True:
            data = await call_until_back(
                self._post_register,
                self._api_outage(),
                waits_for=f"waiting for it to start (giving up after {wait_s:.0f}s)",
                give_up_s=wait_s,
            )
            if data.get("status") == "success":
                break
            now = time.monotonic()
            if now > deadline:
                raise SystemExit(
                    f"no trainer registered with {url} within {wait_s:.0f}s "
                    f"(run-api answered {data.get('status')!r})"
                )
            if not announced or now - announced >= self.config.status_every_s:
                log.warning(
                    "run-api at %s is up but takes no environment yet (it answered %r): it waits for a "
                    "trainer to register (POST /register) and ask for its first batch (GET /batch); "
                    "waiting (%.0fs of %.0fs)",
                    url,
                    data.get("status"),
                    wait_s - (deadline - now),
                    wait_s,
                )
                announced = now
            await asyncio.sleep(1)  # atroposlib's protocol: poll until the trainer registers
        self.env_id = data["env_id"]
        self.wandb_prepend = data["wandb_name"]
        self.curr_step = data["starting_step"]
        self.checkpoint_dir = data["checkpoint_dir"]
        self.checkpoint_interval = data["checkpoint_interval"]
        if self.config.total_steps == -1:
            self.config.total_steps = data["num_steps"]
        log.info("registered with run-api at %s as env %s", url, self.env_id)
        if self.curr_step > 0:
            self.load_checkpoint()

    async def get_status(self) -> None:
        """atroposlib's status poll, waiting out a run-api outage (rollouts pause, scored groups are
        held) and registering again when a restarted run-api no longer knows this env."""

        async def once() -> None:
            await asyncio.wait_for(self._fetch_status(), 30)

        waits_for = RUN_API_WAITS_FOR
        try:
            await call_until_back(once, self._api_outage(), waits_for=waits_for)
        except RunApiStatusError as exc:
            if exc.status < 500:
                raise
            log.warning(
                "run-api at %s answered %s to /status-env: it no longer knows env %s (restarted?); "
                "registering again",
                self.config.rollout_server_url,
                exc.status,
                self.env_id,
            )
            await self.register_env()
            await self.get_server_info()
            await call_until_back(once, self._api_outage(), waits_for=waits_for)

    async def _fetch_status(self) -> None:
        """atroposlib's `get_status` body (status, env weight, worker cap) on the keep-alive client:
        upstream opens an aiohttp session and a connection for it on every pass of the serve loop.
        An HTTP error status raises `RunApiStatusError`."""
        self._status_ok_at = -math.inf
        self.sent_since_status = 0  # a group sent while this poll is in flight counts twice: safe side
        status, raw = await self._api_call("GET", "status-env", body={"env_id": self.env_id})
        if status >= 400:
            raise RunApiStatusError(status, "/status-env", raw)
        self._status_ok_at = time.monotonic()
        self.status_dict = fast_json.loads(raw)
        max_num_workers = self.config.max_num_workers
        if max_num_workers == -1:
            max_num_workers = self.config.max_num_workers_per_node * len(self.server.servers)
        self.max_num_workers = max_num_workers
        await self.server.update_weight(self.status_dict["env_weight"])

    async def _send_scored_data_to_api(self, scored_data: Any) -> None:
        """atroposlib's send, holding the group through a run-api outage. It is sent again only once
        run-api knows this env (after a restart: once `get_status` has registered again), since a
        group posted before the trainer registers would corrupt run-api's state. Whether run-api knows
        this env is asked before the send unless the serve loop's status poll (every <= 0.1 s) found it
        known within `STATUS_FRESH_S`, with no failure since: a restarted run-api cannot be back that
        fast (its start-up alone takes longer), and a question per group cost ~15% of serve's CPU."""
        while True:
            fresh = time.monotonic() - self._status_ok_at < STATUS_FRESH_S
            while not (fresh or await self._env_known()):  # get_status says why, and registers again
                await asyncio.sleep(1)  # the retry period while run-api is away
            try:
                return await self._post_scored(scored_data)
            except Exception as exc:  # noqa: BLE001 - only connection failures are waited out
                if not is_connect_error(exc):
                    raise
                self._status_ok_at = -math.inf
                self._api_outage().failed(describe(unwrap(exc)), RUN_API_WAITS_FOR)

    async def _post_scored(self, scored_data: Any) -> None:
        """One POST of a scored group (or a list of them) as atroposlib makes it: `env_id` stamped,
        `/scored_data` or `/scored_data_list`; a 5xx is tried again (3 attempts in all, atroposlib's
        backoff), a 4xx is logged and counted in `drops` (the group cannot be sent as it is), a
        connection failure is raised at once (the caller holds the group)."""
        for group in scored_data if isinstance(scored_data, list) else [scored_data]:
            group["env_id"] = getattr(self, "env_id", None)
        path = "scored_data_list" if isinstance(scored_data, list) else "scored_data"
        import aiohttp

        url = f"{self.config.rollout_server_url}/{path}"
        if _token_count(scored_data) <= INLINE_TOKENS:
            body, headers = encode_scored(scored_data)  # well under 1 ms: less than a hand-off to a thread
        else:
            body, headers = await asyncio.to_thread(encode_scored, scored_data)
        retrying = AsyncRetrying(
            stop=stop_after_attempt(3),
            wait=wait_random_exponential(multiplier=1, max=10),
            retry=retry_if_exception(lambda exc: not is_connect_error(exc)),
            reraise=True,
        )
        timeout = aiohttp.ClientTimeout(total=SCORED_POST_TIMEOUT_S, connect=RUN_API_TIMEOUT_S)
        async for attempt in retrying:
            with attempt:
                async with self._run_api_http().post(
                    url, data=body, headers=headers, timeout=timeout
                ) as resp:
                    status, answer = resp.status, await resp.read()
                if status >= 500:
                    raise RunApiServerError(f"run-api answered {status} to /{path}")
        if status < 400:
            self.sent_since_status += len(scored_data) if isinstance(scored_data, list) else 1
        else:
            log.error(
                "run-api refused a scored group (%s): %s", status, answer[:300].decode(errors="replace")
            )
            self.drops[f"run-api refused ({status})"] += 1

    async def _env_known(self) -> bool:
        import aiohttp

        try:
            status, _ = await self._api_call("GET", "status-env", body={"env_id": self.env_id}, timeout=10)
        except Exception as exc:  # noqa: BLE001 - any failure to answer means "not known (yet)"
            if not is_connect_error(exc) and not isinstance(exc, aiohttp.ClientError):
                raise
            return False
        return status == 200

    async def env_step_checks(self) -> None:
        """Stop cleanly when the inference server is down under `on_server_down=stop`, and log one
        summary line every `status_every_s` (atroposlib's per-loop lines only with --env.verbose)."""
        if self.watcher is not None and self.watcher.stop_reason:
            raise SystemExit(self.watcher.stop_reason)
        if self.hopeless:
            raise SystemExit(f"serve: {self.hopeless}")
        await super().env_step_checks()
        now = time.monotonic()
        if now - self._last_summary >= self.config.status_every_s:
            self._last_summary = now
            status = getattr(self, "status_dict", None) or {}
            down = self.watcher.down if self.watcher else []
            log.info(
                "serve: step %s/%s · trainer queue %s group(s) · %d group(s) sent · dropped %s · "
                "%d in flight · inference %s",
                status.get("current_step", "?"),
                self.config.total_steps,
                status.get("queue_size", "?"),
                self.groups_ok,
                dict(self.drops) or "none",
                self.inflight,
                f"DOWN: {', '.join(down)}" if down else "up",
            )
            if not self.groups_ok and set(self.drops) == {"identical_scores"}:
                log.warning(
                    "serve: all %d groups so far had identical scores (no learning signal): the items may "
                    "be too hard or too easy for this model, or the model does not answer in the expected "
                    "format (process a few groups to see its rewards)",
                    self.drops["identical_scores"],
                )


class RunApiServerError(Exception):
    """run-api answered a scored group with a 5xx (tried again, as atroposlib does)."""


class RunApiStatusError(Exception):
    """run-api answered a call with an HTTP error status (`status`; the start of its body in the message)."""

    def __init__(self, status: int, path: str, body: bytes) -> None:
        super().__init__(f"run-api answered {status} to {path}: {body[:200].decode(errors='replace')}")
        self.status = status


JSON_HEADERS = {"Content-Type": "application/json"}


SCORED_GZIP_LEVEL = 1  # ~15x less CPU than upstream's level 9 for a ~12% larger body (JSON of ids)


INLINE_TOKENS = 8192  # groups up to this many tokens are encoded on the loop


def encode_scored(payload: Any) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a scored-data POST: the JSON atroposlib's `_post_json_with_compression`
    sends (`fast_json`: the same value, compact), gzipped from 1 KiB when that is smaller, at
    `SCORED_GZIP_LEVEL`."""
    body = fast_json.dumps(payload)
    headers = dict(JSON_HEADERS)
    if len(body) >= 1024:
        packed = gzip.compress(body, compresslevel=SCORED_GZIP_LEVEL)
        if len(packed) < len(body):
            body, headers["Content-Encoding"] = packed, "gzip"
    return body, headers


def _token_count(scored_data: Any) -> int:
    groups = scored_data if isinstance(scored_data, list) else [scored_data]
    return sum(len(seq) for g in groups if isinstance(g, dict) for seq in (g.get("tokens") or ()))


def quiet_atroposlib(verbose: bool) -> None:
    """serve's per-loop status lines (~15/s, atroposlib sets its env logger to DEBUG) would bury the
    warnings: atroposlib logs below WARNING only with --env.verbose."""
    level = logging.INFO if verbose else logging.WARNING
    names = [n for n in logging.root.manager.loggerDict if n == "atroposlib" or n.startswith("atroposlib.")]
    for name in {"atroposlib", *names}:
        logging.getLogger(name).setLevel(level)
