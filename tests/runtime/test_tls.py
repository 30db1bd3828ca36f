"""`environments.atropos_runtime.tls.verify_for`: no CA bundle is loaded for plain-http clients (each load is ~30 ms
of start-up CPU), https clients share one verifying context, and the plain-http context fails closed."""

from __future__ import annotations

import ssl

from atroposlib.envs.server_handling.server_baseline import APIServerConfig

from environments.atropos_runtime import tls
from environments.atropos_runtime.servers import VLLMTokenServer


async def test_plain_http_clients_load_no_ca_bundle(monkeypatch, tiny_model):
    loads = []
    real = ssl.SSLContext.load_verify_locations
    monkeypatch.setattr(
        ssl.SSLContext, "load_verify_locations", lambda self, *a, **k: loads.append(a) or real(self, *a, **k)
    )
    tls._verifying.cache_clear()
    config = APIServerConfig(server_type="vllm", model_name="m", base_url="http://127.0.0.1:9/v1", api_key="x",
                             tokenizer_name=str(tiny_model))  # fmt: skip
    server = VLLMTokenServer(config)
    assert not server._client().closed
    await server.aclose()
    assert loads == []
    assert tls.verify_for("https://example.invalid/v1") is tls.verify_for("http://a", "HTTPS://b")
    assert len(loads) == 1  # the verifying context is built once, on first need


def test_the_plain_http_context_trusts_nothing_and_verifies():
    ctx = tls.verify_for("http://127.0.0.1:8000", "http://127.0.0.1:9001/v1")
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.cert_store_stats()["x509_ca"] == 0 and ctx.get_ca_certs() == []
    https = tls.verify_for("https://127.0.0.1:8443")
    assert https.verify_mode == ssl.CERT_REQUIRED and https.cert_store_stats()["x509_ca"] > 0
