"""Joining a Ray cluster with a deadline: a wrong or unreachable address fails in seconds, in one line.

`ray.init(address=...)` retries an address where no Ray answers for many minutes (each attempt
waits ~35 s on this Ray version), so the Ray scorer first asks the address itself, within
`timeout_s`, and only then calls `ray.init`, which gets the rest of the same deadline:

* `cluster_address(value)`: the address to use (argument, else `RAY_ADDRESS`); raises
  `RemoteScorerError` when there is none or it is not `host:port` (also `auto`, `local`, `ray://`).
* `check_gcs(address, timeout_s)`: a TCP connection, then Ray's own `GetClusterId` RPC over plain
  gRPC. Raises `RemoteScorerError` naming the address and what answered: connection refused,
  nothing within the deadline, a name that does not resolve, a server that is not a Ray GCS.
* `bounded_init(address, timeout_s, **init_args)`: `check_gcs`, then `ray.init` in a thread joined
  with the rest of the deadline; raises `RemoteScorerError` if it does not finish in time (that
  thread cannot be stopped and is left to finish or fail on its own; the caller's scorer is failed).

`auto`, `local` and Ray Client (`ray://`) addresses get only the TCP check (or none): Ray resolves
them itself.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any


class RemoteScorerError(RuntimeError):
    """The Ray scorer cannot start (no address, cluster unreachable, no usable node): the message says why."""


def cluster_address(value: str | None) -> str:
    """The cluster address to join (`value`, else `RAY_ADDRESS`), checked for its form."""
    address = (value or os.environ.get("RAY_ADDRESS") or "").strip()
    if not address:
        raise RemoteScorerError(
            "no Ray cluster address: pass one (e.g. --env.ray_address HEAD:6379) or set RAY_ADDRESS; "
            "start the cluster first with `ray start --head` (see README)"
        )
    if address in ("auto", "local"):
        return address
    if _host_port(address) is None:
        raise RemoteScorerError(f"Ray cluster address {address!r} is not host:port (e.g. 10.0.0.1:6379)")
    return address


def _host_port(address: str) -> tuple[str, int] | None:
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


def check_gcs(address: str, timeout_s: float) -> None:
    """Raise `RemoteScorerError` unless a Ray GCS answers at `address` within `timeout_s`."""
    parsed = _host_port(address)
    if parsed is None:  # auto / local: Ray finds (or starts) the cluster itself
        return
    host, port = parsed
    deadline = time.monotonic() + timeout_s
    where = f"Ray cluster at {address}"
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except ConnectionRefusedError:
        raise RemoteScorerError(f"{where}: connection refused (nothing listens there)") from None
    except socket.gaierror as exc:
        raise RemoteScorerError(f"{where}: host name does not resolve ({exc.strerror})") from None
    except TimeoutError:
        raise RemoteScorerError(
            f"{where}: no answer within {timeout_s:g} s (host down or filtered)"
        ) from None
    except OSError as exc:
        raise RemoteScorerError(f"{where}: cannot connect ({exc.strerror or exc})") from None
    if address.startswith("ray://") or os.environ.get("RAY_USE_TLS", "0") not in ("", "0"):
        return  # a Ray Client server, or a TLS GCS: the plain gRPC question below does not apply
    _ask_gcs(f"{host}:{port}" if ":" not in host else f"[{host}]:{port}", where, deadline)


def _ask_gcs(target: str, where: str, deadline: float) -> None:
    import grpc  # Ray's own dependency
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    left = max(0.5, deadline - time.monotonic())
    with grpc.insecure_channel(target, options=[("grpc.enable_retries", 0)]) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=left, wait_for_ready=False)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                return  # a Ray GCS that wants a token: ray.init brings it
            detail = ((exc.details() if hasattr(exc, "details") else "") or "").split("last error: ")[-1]
            what = {
                grpc.StatusCode.UNIMPLEMENTED: "a gRPC server that is not a Ray GCS answered",
                grpc.StatusCode.DEADLINE_EXCEEDED: f"the port is open but no Ray GCS answered within "
                f"{left:.0f} s",
            }.get(code, f"the port is open but what answered is not a Ray GCS ({detail[:160]})")
            raise RemoteScorerError(f"{where}: {what}") from None


def bounded_init(address: str, timeout_s: float, **init_args: Any) -> None:
    """`check_gcs` then `ray.init(address=address, **init_args)`, all within `timeout_s`."""
    import ray

    start = time.monotonic()
    check_gcs(address, timeout_s)
    failure: list[BaseException] = []

    def init() -> None:
        try:
            ray.init(address=address, **init_args)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=init, name="rlvr-ray-init", daemon=True)
    thread.start()
    thread.join(max(1.0, timeout_s - (time.monotonic() - start)))
    if thread.is_alive():
        raise RemoteScorerError(
            f"Ray cluster at {address}: its GCS answered but ray.init did not finish within "
            f"{timeout_s:g} s (is this machine's node address reachable from the cluster?)"
        )
    if failure:
        exc = failure[0]
        line = next((s.strip() for s in str(exc).splitlines() if s.strip()), "")[:300]
        raise RemoteScorerError(f"Ray cluster at {address}: ray.init failed: {type(exc).__name__}: {line}")
