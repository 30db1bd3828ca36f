"""Watching the servers a run depends on, so that an outage is reported in seconds, not minutes.

atroposlib gates every request on `server.server_healthy`, set by a background probe that it starts
on the first request. Its probe waits up to the request timeout (300 s) on a hung server, and a
request waiting on an unhealthy server says nothing at all (docs/atropos.md, "health gating
hang"). `InferenceWatcher` takes that job over for every inference server of a run, using only
atroposlib's public attributes (`server_healthy`, `initialized`, `check_task`; nothing patched):

* each server is probed every `interval_s` with a short timeout (`probe_timeout_s`) on the URL that
  `environments.atropos_runtime.servers.probe_url` names (`/models`, or `/health` for `/generate` servers);
* a failed probe marks the server down at once and logs ONE line naming its URL and the reason;
  while it stays down a status line repeats every `status_every_s`; when it answers again one line
  says so and requests resume (atroposlib's retry loop waits on `server_healthy`);
* `policy="stop"` instead sets `stop_reason`, and the modes end cleanly (already written groups
  kept) with that one line as the error;
* `paused_s()` is the total time every server was down, so inference deadlines can exclude it: a
  group waiting on a dead server is not dropped as "slow".

`call_until_back` does the same for run-api calls: it retries a call that cannot connect, and an
`Outage` shared by all callers logs what is wrong and what it waits for once, then every
`status_every_s`, then when it is back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

import aiohttp
import httpx

from environments.atropos_runtime import lazy_imports as _atropos_lazy
from environments.atropos_runtime.servers import probe_url
from environments.atropos_runtime.tls import verify_for

log = logging.getLogger("rlvr")
T = TypeVar("T")

OnDown = Literal["wait", "stop"]


def describe(exc: BaseException) -> str:
    """A short reason for a failed call: exception type and the first non-blank line of its message,
    else of its cause's or context's (httpx raises e.g. `ReadError('')` from `ReadError('')` when a
    kept-alive connection died with its server); the type alone when none has one."""
    if isinstance(exc, httpx.TimeoutException):
        what = {
            httpx.ConnectTimeout: "no connection",
            httpx.ReadTimeout: "connected, but no answer",
            httpx.WriteTimeout: "connected, but the request could not be sent",
            httpx.PoolTimeout: "no free connection",
        }.get(type(exc), "no answer")
        return f"{type(exc).__name__}: {what} within the timeout (a hung or overloaded server)"
    text = ""
    for source in (exc, exc.__cause__, exc.__context__):
        lines = (
            [line.strip() for line in str(source).splitlines() if line.strip()] if source is not None else []
        )
        if lines:
            text = lines[0]
            break
    return f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__


class _State:
    def __init__(self, server: Any) -> None:
        self.server = server
        self.url = server.config.base_url
        self.down_since: float | None = None
        self.reason = ""
        self.last_status = 0.0


class InferenceWatcher:
    """Probes every inference server of a run (see module docstring)."""

    def __init__(
        self,
        servers: Sequence[Any],
        *,
        policy: OnDown = "wait",
        interval_s: float = 1.0,
        probe_timeout_s: float = 5.0,
        status_every_s: float = 30.0,
        waiting: Callable[[], str] = lambda: "",
    ) -> None:
        self.states = [_State(s) for s in servers if getattr(getattr(s, "config", None), "base_url", "")]
        self.policy = policy
        self.interval_s = interval_s
        self.probe_timeout_s = probe_timeout_s
        self.status_every_s = status_every_s
        self.waiting = waiting  # what is waiting on the server, for the status line
        self.stop_reason: str | None = None
        self.stopped = asyncio.Event()
        self.outages = 0
        self._paused = 0.0
        self._all_down_since: float | None = None
        self._task: asyncio.Task | None = None
        self._up = asyncio.Event()
        self._up.set()
        self._round = asyncio.Event()

    async def start(self) -> None:
        """Take over atroposlib's health probing for every watched server."""
        for state in self.states:
            server = state.server
            if server.check_task is not None:
                server.check_task.cancel()
            server.initialized = True  # atroposlib starts no probe of its own
            server.server_healthy = True
        self._task = asyncio.create_task(self._run())
        for state in self.states:
            state.server.check_task = self._task

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def paused_s(self) -> float:
        """Seconds during which every watched server was down (so far, including now)."""
        now = time.monotonic()
        return self._paused + (now - self._all_down_since if self._all_down_since is not None else 0.0)

    async def wait_up(self) -> None:
        """Return once some watched server answers again (or at once when the run is stopping)."""
        while not self._up.is_set() and self.stop_reason is None:
            await asyncio.wait(
                {asyncio.ensure_future(self._up.wait()), asyncio.ensure_future(self.stopped.wait())},
                return_when=asyncio.FIRST_COMPLETED,
            )

    async def next_round(self) -> None:
        """Wait for the next full probe round (so a failure just seen is reflected in `down`)."""
        if self._task is None or self._task.done():
            return
        for _ in range(2):  # the round in progress may have started before the failure
            self._round.clear()
            await self._round.wait()

    @property
    def down(self) -> list[str]:
        return [s.url for s in self.states if s.down_since is not None]

    async def _run(self) -> None:
        verify = verify_for(*(probe_url(s.server) for s in self.states), trust_env=False)
        async with httpx.AsyncClient(timeout=self.probe_timeout_s, trust_env=False, verify=verify) as http:
            while True:
                await asyncio.gather(*(self._probe(http, s) for s in self.states))
                self._account()
                self._round.set()
                await asyncio.sleep(self.interval_s)  # the probe period

    async def _probe(self, http: httpx.AsyncClient, state: _State) -> None:
        config = state.server.config
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        try:
            resp = await http.get(probe_url(state.server), headers=headers)
            problem = None if resp.status_code < 400 else f"HTTP {resp.status_code}"
        except httpx.TimeoutException:
            problem = f"no answer within {self.probe_timeout_s:g}s"
        except httpx.HTTPError as exc:
            problem = describe(exc)
        now = time.monotonic()
        if problem is None:
            if state.down_since is not None:
                log.warning(
                    "inference server %s is back after %.0fs; resuming", state.url, now - state.down_since
                )
            state.down_since = None
            state.server.server_healthy = True
            return
        state.server.server_healthy = False
        if state.down_since is None:
            state.down_since, state.reason, state.last_status = now, problem, now
            self.outages += 1
            if self.policy == "stop":
                self.stop_reason = f"inference server {state.url} is down ({problem}); stopping"
                log.error("%s (--env.on_server_down stop)", self.stop_reason)
                self.stopped.set()
            else:
                log.warning(
                    "inference server %s is down (%s); waiting for it to come back "
                    "(--env.on_server_down stop to stop instead)%s",
                    state.url,
                    problem,
                    self._waiting(),
                )
        elif now - state.last_status >= self.status_every_s:
            state.last_status, state.reason = now, problem
            log.warning(
                "still waiting for inference server %s: down for %.0fs (%s)%s",
                state.url,
                now - state.down_since,
                problem,
                self._waiting(),
            )

    def _waiting(self) -> str:
        what = self.waiting()
        return f"; {what}" if what else ""

    def _account(self) -> None:
        all_down = bool(self.states) and all(s.down_since is not None for s in self.states)
        now = time.monotonic()
        if all_down and self._all_down_since is None:
            self._all_down_since = now
            self._up.clear()
        elif not all_down and self._all_down_since is not None:
            self._paused += now - self._all_down_since
            self._all_down_since = None
            self._up.set()


async def within(coro: Awaitable[T], timeout_s: float, watcher: InferenceWatcher | None) -> T:
    """`coro` with a deadline of `timeout_s` seconds of time during which an inference server was
    up: time spent with every server down does not count. Raises `asyncio.TimeoutError`."""
    if watcher is None:
        return await asyncio.wait_for(coro, timeout_s)
    task = asyncio.ensure_future(coro)
    start_paused = watcher.paused_s()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            now = time.monotonic()
            limit = deadline + (watcher.paused_s() - start_paused)
            if now >= limit:
                raise asyncio.TimeoutError
            done, _ = await asyncio.wait({task}, timeout=min(limit - now, 1.0))
            if done:
                return task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def connect_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that mean "the server did not answer". aiohttp's (atroposlib's run-api calls)
    are in only once the real aiohttp is imported: none can be raised before, and naming them would
    import it (~150 ms of every start, see `_atropos_lazy`)."""
    errors: tuple[type[BaseException], ...] = (httpx.TransportError, asyncio.TimeoutError, OSError)
    if _atropos_lazy.imported("aiohttp"):
        errors = (aiohttp.ClientConnectionError, *errors)
    return errors


def is_connect_error(exc: BaseException) -> bool:
    """True when `exc` (or what a tenacity RetryError wraps) means the server did not answer."""
    return isinstance(unwrap(exc), connect_errors())


def unwrap(exc: BaseException) -> BaseException:
    """The last attempt's exception of a tenacity RetryError, else `exc` itself."""
    last = getattr(exc, "last_attempt", None)
    if last is not None and last.failed:
        return last.exception()
    return exc


class Outage:
    """One server's outage as the log tells it: the first failure of any caller is one line saying
    what is wrong and what we wait for, then one status line per `status_every_s`, then one line
    when it answers again. Shared by every caller of the same server."""

    def __init__(self, what: str, url: str, status_every_s: float = 30.0) -> None:
        self.what, self.url, self.status_every_s = what, url, status_every_s
        self.since: float | None = None
        self._last = 0.0

    def failed(self, reason: str, waits_for: str) -> float:
        """Record a failure; returns how long the outage has lasted."""
        now = time.monotonic()
        if self.since is None:
            self.since, self._last = now, now
            log.warning("%s at %s is not answering (%s); %s", self.what, self.url, reason, waits_for)
        elif now - self._last >= self.status_every_s:
            self._last = now
            log.warning(
                "still no answer from %s at %s after %.0fs (%s); %s",
                self.what,
                self.url,
                now - self.since,
                reason,
                waits_for,
            )
        return now - self.since

    def recovered(self) -> None:
        if self.since is not None:
            log.warning("%s at %s is back after %.0fs", self.what, self.url, time.monotonic() - self.since)
            self.since = None


async def call_until_back(
    call: Callable[[], Awaitable[T]],
    outage: Outage,
    *,
    waits_for: str,
    give_up_s: float | None = None,
    retry_every_s: float = 1.0,
) -> T:
    """`await call()`, retried while the server does not answer (connection errors only; any other
    error propagates), reported through `outage`. After `give_up_s` of outage: SystemExit."""
    while True:
        try:
            result = await call()
        except Exception as exc:  # noqa: BLE001 - only connection failures are waited out
            if not is_connect_error(exc):
                raise
            reason = describe(unwrap(exc))
            lasted = outage.failed(reason, waits_for)
            if give_up_s is not None and lasted > give_up_s:
                raise SystemExit(
                    f"{outage.what} at {outage.url} did not answer for {give_up_s:.0f}s ({reason}); giving up"
                ) from None
            await asyncio.sleep(retry_every_s)  # the retry period while the server is away
            continue
        outage.recovered()
        return result
