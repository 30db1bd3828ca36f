"""Docker backend: a warm pool of long-lived containers, each running the fork-server worker as PID 1.

Containers: network none, read-only root, tmpfs scratch (/tmp) and /dev/shm, non-root user
(65534), every capability dropped, no-new-privileges, memory/CPU/pids limits, and the project's
seccomp filter (`sandbox/seccomp.py`, which the worker adds on top of Docker's default profile:
that profile lets a job change another process's rlimits and scheduling). The same worker
and protocol as the bubblewrap pool (`sandbox/_worker.py`): the host listens on a one-shot unix
socket bind-mounted into the container, the worker connects once, the listener is closed and
unlinked, and every job then gets fresh host pipes passed over that socket (so there is no
`docker attach` stream to wedge and output caps are enforced on the host). Python commands
run by fork from the warm interpreter; any other command is fork+exec'd in the container.

Per-job limits: rlimits in the job process; on cgroup v1/v2 hosts where the container's cgroup
is visible (root, cgroupfs driver) also per-job memory/pids written into the container's cgroup.
Wall time and output caps: the host kills the container (force remove) and a new one starts on the
next job. Cleanup: every container carries labels with this process's host name and pid;
`close()` removes ours, and containers of dead owners are swept at start (`sweep_containers`).

Images: `python -m sandbox build-image` imports a registry-free image from the installed package
(`sandbox.image`: empty rootfs, host /usr mounted read-only at run time). With a registry, build the
Dockerfile that `python -m sandbox build-image --dockerfile` prints and set
`DockerConfig(image=..., mount_host_usr=False, python="/usr/local/bin/python3")`. The worker and
the harness are never in the image nor read from the install path: a staged copy is mounted
(`sandbox.staging`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from queue import SimpleQueue

from sandbox import _proc, seccomp, staging
from sandbox.backend import PRELOAD, SlotResults, _one_line, python_problem, sandbox_python
from sandbox.borrow import WarmBorrowing
from sandbox.cgroups import ROOT, Slot, _pid_alive
from sandbox.core import ExecResult, Job, Limits, SandboxError, SandboxUnavailable, default_slots
from sandbox.image import host_lib_dirs
from sandbox.pool import WORKER_DST, Worker, job_plan

LABEL = "rlvr-sandbox"
OWNER_LABEL = "rlvr-sandbox.owner"
CTL_DST = "/run/rlvr/ctl.sock"


@dataclass(frozen=True)
class DockerConfig:
    """How the Docker pool runs. Container-wide caps; jobs get their own rlimits inside them."""

    slots: int = field(default_factory=default_slots)  # warm containers = concurrent jobs (CPUs + 1)
    image: str = "rlvr-sandbox:local"
    mount_host_usr: bool = True  # the local image has no userland: bind the host's /usr read-only
    python: str = field(default_factory=sandbox_python)  # from the host /usr unless mount_host_usr=False
    memory_mb: int = 1024
    pids: int = 64
    cpus: float = 1.0
    user: str = "65534:65534"
    preload: tuple[str, ...] = PRELOAD
    base_url: str | None = None  # docker daemon; default: DOCKER_HOST / the local socket
    start_timeout_s: float = 30.0
    worker_overhead_mb: int = 96


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def sweep_containers(client, *, everything: bool = False) -> int:
    """Force-remove sandbox containers whose owning process (on this host) is gone; all if `everything`."""
    n = 0
    host = socket.gethostname()
    for c in client.containers.list(all=True, filters={"label": LABEL}):
        owner = c.labels.get(OWNER_LABEL, "")
        owner_host, _, pid = owner.rpartition(":")
        stale = owner_host == host and pid.isdigit() and not _pid_alive(int(pid))
        if everything or stale:
            try:
                c.remove(force=True)
                n += 1
            except Exception:  # already gone
                pass
    return n


def container_slot(container_id: str, index: int, memory_mb: int) -> Slot | None:
    """The container's own cgroup as a `Slot` (per-job memory/pids), if visible and writable here."""
    candidates = {
        "v1": {c: ROOT / c / "docker" / container_id for c in ("memory", "pids")},
        "v2": {"unified": ROOT / "system.slice" / f"docker-{container_id}.scope"},
        "v2b": {"unified": ROOT / "docker" / container_id},
    }
    for version, dirs in candidates.items():
        if all(d.is_dir() and os.access(d, os.W_OK) for d in dirs.values()):
            slot = Slot(index, version[:2], dict(dirs), holds_thread=False)
            slot._memory_mb = memory_mb
            return slot
    return None


class DockerWorker(Worker):
    """A warm worker living in its own container."""

    extra_pids = 1  # only the worker shares the container's pids cgroup with the job

    def __init__(self, box: DockerSandbox, index: int):
        super().__init__(box, None)
        self.index = index
        self.container = None
        self.launches = 0

    def alive(self) -> bool:
        """Cheap check (no API call): started, and its cgroup still exists when we can see it."""
        if self.container is None or self.sock is None:
            return False
        return self.slot is None or all(d.is_dir() for d in self.slot.dirs.values())

    def _launch(self, scratch_mb: int) -> socket.socket:
        box: DockerSandbox = self.box
        cfg = box.config
        self.launches += 1
        path = os.path.join(box.sockdir, f"ctl-{self.index}-{self.launches}.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            listener.bind(path)
            os.chmod(path, 0o666)  # the dir is 0700 root: only the bind mount reaches it
            listener.listen(1)
            listener.settimeout(cfg.start_timeout_s)
            # the in-sandbox files from a copy any uid may read, never from the install path
            staged = staging.staged_dir()
            volumes = {f"{staged}/{n}": {"bind": staging.dest(n), "mode": "ro"} for n in staging.IN_SANDBOX}
            volumes[path] = {"bind": CTL_DST, "mode": "rw"}
            if cfg.mount_host_usr:
                for d in ["/usr", *host_lib_dirs()]:
                    volumes[d] = {"bind": d, "mode": "ro"}
            self.container = box.client.containers.run(
                cfg.image,
                [cfg.python, "-I", WORKER_DST, CTL_DST, ",".join(cfg.preload), box.filter_hex],
                detach=True,
                user=cfg.user,
                network_mode="none",
                read_only=True,
                tmpfs={"/tmp": f"size={scratch_mb}m,mode=1777", "/dev/shm": "size=16m,mode=1777"},
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                mem_limit=f"{cfg.memory_mb}m",
                memswap_limit=f"{cfg.memory_mb}m",
                pids_limit=cfg.pids,
                nano_cpus=int(cfg.cpus * 1e9),
                ipc_mode="private",
                hostname="sandbox",
                environment={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
                labels={LABEL: "1", OWNER_LABEL: _owner()},
                volumes=volumes,
            )
            conn, _ = listener.accept()
        except Exception as e:
            why = self.stderr_tail()
            self._kill()
            raise SandboxError(f"docker worker failed to start: {e} {why!r}") from e
        finally:
            listener.close()
            if os.path.exists(path):
                os.unlink(path)  # nobody else can ever connect
        conn.settimeout(None)
        self.slot = container_slot(self.container.id, self.index, cfg.memory_mb)
        return conn

    def stderr_tail(self) -> bytes:
        try:
            return self.container.logs(tail=20) if self.container is not None else b""
        except Exception:
            return b""

    def _kill(self) -> None:
        if self.container is not None:
            try:
                self.container.remove(force=True)
            except Exception:
                pass
        self.container = None
        self.slot = None


class DockerSandbox(WarmBorrowing, SlotResults):
    """The Docker warm-pool backend. Same API as `BwrapSandbox`: run / run_sync / submit / close."""

    name = "docker"

    def __init__(self, config: DockerConfig | None = None):
        self.config = cfg = config or DockerConfig()
        try:
            import docker
        except ImportError as e:
            raise SandboxUnavailable("the docker SDK is not installed (pip install docker)") from e
        try:
            self.client = docker.DockerClient(base_url=cfg.base_url) if cfg.base_url else docker.from_env()
            self.client.ping()
        except Exception as e:
            fix = (
                "add this user to the docker group (or run as root)"
                if "ermission denied" in str(e)
                else "start dockerd (e.g. `dockerd &`, or `systemctl start docker`)"
            )
            raise SandboxUnavailable(_one_line(f"no Docker engine answers ({e}); fix: {fix}")) from e
        try:
            self.client.images.get(cfg.image)
        except Exception as e:
            raise SandboxUnavailable(
                f"image {cfg.image!r} not found ({type(e).__name__}); fix: python -m sandbox build-image "
                f"--tag {cfg.image} (offline, no registry)"
            ) from e
        if cfg.mount_host_usr:
            problem = python_problem(cfg.python)
            if problem:
                raise SandboxUnavailable(problem)
        sweep_containers(self.client)
        program = seccomp.program()
        self.filter_hex = program.hex() if program else ""  # the worker installs it on itself
        # without it, Docker's default profile lets a job change what the worker hands the next job;
        # the worker's own check (`_worker._inherited`) then recycles it after such a job
        self.notes: list[str] = (
            [] if program else ["no seccomp filter for this architecture (Docker's profile only)"]
        )
        self.cgroups = None
        self.sockdir = tempfile.mkdtemp(prefix="rlvr-docker-")
        os.chmod(self.sockdir, 0o700)
        self._free: SimpleQueue[int] = SimpleQueue()
        for i in range(cfg.slots):
            self._free.put(i)
        self._local = threading.local()
        self._workers: list[DockerWorker] = []
        self._workers_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(cfg.slots, "docker-slot", initializer=self._init_thread)
        self._closed = False
        self._init_borrowing()
        self.stats = {"jobs": 0, "pool_jobs": 0, "worker_starts": 0, "worker_recycles": 0}
        reason = self._probe()
        if reason:
            self._shutdown()
            raise SandboxUnavailable(reason)

    def _probe(self) -> str | None:
        """Run a Python job in a warm container once (it stays warm); why it cannot, or None."""
        job = Job((self.config.python, "-c", "print(6*7)"), limits=Limits(wall_time_s=60.0))
        try:
            res = self._pool.submit(self._run_blocking, job).result()
        except Exception as e:  # noqa: BLE001 - any failure means: no job runs here
            return _one_line(f"a docker sandbox job failed to start: {type(e).__name__}: {e}")
        if res.stdout.strip() != b"42":
            return _one_line(
                f"{self.config.python} failed in a docker sandbox (exit {res.exit_code}, limit "
                f"{res.limit_hit.value}): {res.stderr[-300:]!r}"
            )
        self.stats.update(jobs=0, pool_jobs=0)  # count the caller's jobs only
        return None

    # ------------------------------------------------------------ public API
    def submit(self, job: Job) -> Future[ExecResult]:
        if self._closed:
            raise SandboxError("sandbox is closed")
        return self._pool.submit(self._run_blocking, job)

    def _warm_slot(self) -> None:
        w = self._local_worker()
        with w.lock:  # a borrower may be running a job on it
            w.ensure()

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._shutdown)

    def close_sync(self) -> None:
        self._shutdown()

    def describe(self) -> str:
        notes = "".join(f"; {n}" for n in self.notes)
        return f"docker (slots={self.config.slots}, image={self.config.image}{notes})"

    def job_rlimits(self, limits: Limits) -> list[tuple[int, int]]:
        return _proc.job_rlimits(limits, None)  # pids are capped by the container, not per-uid NPROC

    # ------------------------------------------------------------ internals
    def _init_thread(self) -> None:
        w = DockerWorker(self, self._free.get())
        self._local.worker = w
        with self._workers_lock:
            self._workers.append(w)

    def _local_worker(self) -> DockerWorker:
        return self._local.worker

    def _plan(self, job: Job) -> dict:
        """How the warm worker runs `job`: Python in the forked child or the harness, else exec."""
        plan = job_plan(job, self.config.python)
        if plan is None:
            plan = {
                "mode": "exec",
                "target": job.command[0],
                "args": list(job.command),
                "unbuffered": False,
                "isolated": False,
            }
        return plan

    def _borrow_plan(self, job: Job) -> dict | None:
        if not job.command or job.limits.network:
            return None  # `_run_blocking` raises the error
        return self._plan(job)

    def _run_blocking(self, job: Job) -> ExecResult:
        if not job.command:
            raise ValueError("job.command is empty")
        if job.limits.network:
            raise SandboxError("the docker pool has no network; use the bwrap backend for network jobs")
        self.stats["jobs"] += 1
        self.stats["pool_jobs"] += 1
        return self._local.worker.run(job, self._plan(job))

    def _shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._workers_lock:
            workers = list(self._workers)
        for w in workers:
            w.stop()
        self._pool.shutdown(wait=True)
        shutil.rmtree(self.sockdir, ignore_errors=True)
        try:
            for c in self.client.containers.list(all=True, filters={"label": f"{OWNER_LABEL}={_owner()}"}):
                c.remove(force=True)
        except Exception:
            pass


__all__ = ["DockerConfig", "DockerSandbox", "sweep_containers"]
