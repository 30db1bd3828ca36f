"""The `verify=` argument of every httpx client the environments open, built once per process.

httpx builds a verifying SSL context (the CA bundle loaded) for every client and for every
`httpx.get`/`httpx.post`, even for a plain-http URL: ~30 ms of CPU each, ~100 ms the first time. A
process start opened five (server check, logprobs probe x2, token client, inference watcher).

`verify_for(*urls)`: for https URLs, the verifying context httpx would build, made once and shared;
for any other URL a client context that trusts no CA at all (nothing to load). A plain-http client
never uses it, and a TLS connection through it could never be verified, so it fails closed.
"""

from __future__ import annotations

import functools
import ssl
from urllib.parse import urlsplit

import httpx


@functools.cache
def _verifying(trust_env: bool) -> ssl.SSLContext:
    return httpx.create_ssl_context(trust_env=trust_env)


@functools.cache
def _trusting_nothing() -> ssl.SSLContext:
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED + hostname check, no CA loaded


def verify_for(*urls: str | httpx.URL, trust_env: bool = True) -> ssl.SSLContext:
    """The context for a client whose requests all go to `urls` (see module docstring): the
    verifying one if any of them is https."""
    if any(urlsplit(str(url)).scheme.lower() == "https" for url in urls):
        return _verifying(trust_env)
    return _trusting_nothing()
