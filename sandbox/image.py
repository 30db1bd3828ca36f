"""`python -m sandbox build-image`: the Docker backend's image, built from the installed package alone,
offline (no registry, no Dockerfile, no repository script).

The image is an almost empty root file system imported with `docker import`: mount points, /tmp
1777 (Docker copies an image directory's mode onto the tmpfs mounted there), a passwd entry for
uid 65534 and, on a merged-/usr host, the /bin and /lib* links into /usr. Its userland is the host's
/usr, bind-mounted read-only when a container starts (`DockerConfig(mount_host_usr=True)`, the
default; on a host whose /bin and /lib* are real directories those are mounted too). The warm
worker and the harness are not in the image: the backend mounts a staged copy of them
(`sandbox.staging`), so the image does not go stale when the package changes.

With a registry, `python -m sandbox build-image --dockerfile` prints a Dockerfile for a
self-contained image instead (build it with `docker build`, then set
`DockerConfig(image=..., mount_host_usr=False, python="/usr/local/bin/python3")`).
"""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path

DEFAULT_TAG = "rlvr-sandbox:local"
ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
DOCKERFILE = Path(__file__).with_name("Dockerfile")  # package data: the registry variant


def rootfs_tar() -> bytes:
    """The image's root file system as an uncompressed tar (built in memory, owned by root)."""
    buf = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def add(name: str, kind: bytes, mode: int, data: bytes = b"", link: str = "") -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime, info.linkname = kind, mode, now, link
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)

        for d in ("usr", "proc", "dev", "sys", "etc", "run", "run/rlvr"):
            add(d, tarfile.DIRTYPE, 0o755)
        add("tmp", tarfile.DIRTYPE, 0o1777)
        for name in ROOT_LINKS:
            if os.path.islink(f"/{name}"):
                add(name, tarfile.SYMTYPE, 0o777, link=os.readlink(f"/{name}"))
        add("etc/passwd", tarfile.REGTYPE, 0o644, b"sandbox:x:65534:65534:sandbox:/tmp:/usr/sbin/nologin\n")
        add("etc/group", tarfile.REGTYPE, 0o644, b"sandbox:x:65534:\n")
    return buf.getvalue()


def host_lib_dirs() -> list[str]:
    """The host's /bin, /lib* that are real directories (not links into /usr): a container of this
    image needs them mounted read-only next to /usr (the dynamic loader lives there)."""
    return [f"/{n}" for n in ROOT_LINKS if os.path.isdir(f"/{n}") and not os.path.islink(f"/{n}")]


def build_image(tag: str = DEFAULT_TAG, *, client=None, force: bool = False) -> str:
    """Import the image as `tag` (no registry); keep an existing one unless `force`. Returns its id."""
    if client is None:
        import docker

        client = docker.from_env()
    if not force:
        try:
            return client.images.get(tag).id
        except Exception:  # noqa: BLE001 - not there (or unreadable): build it
            pass
    repository, _, version = tag.rpartition(":") if ":" in tag.rsplit("/", 1)[-1] else (tag, "", "latest")
    # no WORKDIR: it would reset the tmpfs /tmp to 0755 root
    client.api.import_image_from_data(
        rootfs_tar(), repository=repository, tag=version, changes=["USER 65534:65534"]
    )
    return client.images.get(tag).id
