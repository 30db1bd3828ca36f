"""Import shims that keep atroposlib's start-up to what the chosen mode needs (no fork, no patch).

`atroposlib.envs.base` imports `wandb`, `transformers.AutoTokenizer`, `aiohttp` (its run-api calls),
`yaml` (`--config`), `jsonlines` and `openai` at module level;
`AutoTokenizer` imports torch, sympy and torch._dynamo, and importing transformers at all costs ~2 s
on a loaded 2-core machine (it scans its own sources and every installed distribution). Its HTML
viewer imports `markdown`, `httpx` imports its command-line entry point (rich, click, pygments), and
`httpcore` imports `trio` whenever it is installed (~0.14 s), though only a trio event loop uses it.
`install()` must run before atroposlib is first imported (`environments/__init__.py` calls it) and
puts stand-ins into `sys.modules`:

* `wandb`, `aiohttp`, `yaml`, `jsonlines`, `trio`, `markdown`, `transformers`: a `_StandIn` module
  (real `__spec__`, `__path__`, `__file__`).
  Reading any attribute it does not define, or importing any submodule, imports the real package,
  which replaces the stand-in in `sys.modules`; the stand-in then forwards every attribute read (a
  dict lookup and a call, so only packages read rarely through old references are stood in for).
  So `wandb` is only imported by `wandb.init` (`--env.use_wandb true`).
* `openai`, `openai.types`, `openai.types.chat`: deferred-init stand-ins. atroposlib imports only
  `ChatCompletion`/`Completion` (submodules), unless a server it builds is an OpenAI client; those
  submodules load under the stand-ins without the packages' `__init__`s (~0.3-0.5 s: every type the
  SDK has). Reading any other attribute of a stand-in imports the real package (and the real
  `__init__` of every deferred package under it); the submodules already loaded are kept and bound
  on it, so classes stay the same objects.
* `aiohttp.ClientSession` is a forwarding class (calls, attributes, isinstance go to the real one):
  atroposlib's `BaseEnv` names it in an annotation at class creation.
* `transformers.AutoTokenizer` is the stand-in's one own attribute: it forwards everything to the
  real class except `from_pretrained`, which is `load_tokenizer` below.
* `httpx._main`: `main` imports the real CLI module when called.

`load_tokenizer(name)` answers as `transformers.AutoTokenizer.from_pretrained(name)` does. For a
local directory, the first load goes through the real AutoTokenizer and remembers (in
`$RLVR_CACHE_DIR` or `~/.cache/rlvr-envs`, keyed by the transformers/tokenizers/jinja2 versions, the
directory and the size/mtime of its config files) the class it chose and, if it passes the probe
checks of `environments/atropos_runtime/tokenizer_snapshot.py`, a snapshot of its state. Later loads return a
`SnapshotTokenizer` (no transformers import at all), whose unimplemented calls go to the remembered
class loaded with AutoTokenizer's own arguments. Hub names, extra arguments, or any change of the
files take the real AutoTokenizer path. Within one process a repeated no-argument load returns the same
tokenizer object (atroposlib loads it once in BaseEnv and once per server). `RLVR_EAGER_IMPORTS=1`
disables every shim.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import sys
import threading
import types
from pathlib import Path
from typing import Any

_STAMPED_SUFFIXES = (".json", ".jinja", ".model", ".txt", ".tiktoken", ".py")
_MEMO_VERSION = 2
_lock = threading.RLock()
_loaded: dict[str, Any] = {}


def install() -> None:
    """Install the stand-ins (idempotent; a no-op for packages already imported)."""
    if os.environ.get("RLVR_EAGER_IMPORTS", "").strip().lower() in ("1", "true", "yes"):
        return
    _stand_in("wandb")
    # atroposlib's run-api calls (serve); process and evaluate never make one. Its class body names
    # `aiohttp.ClientSession` in an annotation, so that name is a forwarding class.
    _stand_in("aiohttp", ClientSession=_forwarding_class("aiohttp", "ClientSession"))
    # not numpy (~0.1 s): transformers, torch and others would keep reading it through a stand-in
    _stand_in("yaml")  # `--config file.yaml`
    _stand_in("jsonlines")  # atroposlib's own writers (RubricEnv writes its files itself)
    _stand_in("trio")  # httpcore imports it when installed (selenium's dependency), for trio loops only
    _stand_in("markdown")  # atroposlib's jsonl2html viewer; RubricEnv writes its own HTML
    _stand_in("transformers", AutoTokenizer=AutoTokenizer)
    for name in ("openai", "openai.types", "openai.types.chat"):  # atroposlib needs two type modules
        _stand_in(name, deferred_init=True)
    _httpx_main_stand_in()


def imported(name: str) -> bool:
    """True when the real `name` is imported (not absent, not a stand-in)."""
    module = sys.modules.get(name)
    return module is not None and not isinstance(module, _StandIn)


# ------------------------------------------------------------------ stand-in packages
class _StandIn(types.ModuleType):
    """`sys.modules[name]` until something needs an attribute the stand-in does not define; then the
    real package is imported (replacing the stand-in in `sys.modules`) and the attribute read from it."""

    _deferred_init = False  # True: submodules load under the stand-in (the package's __init__ waits)

    def __getattr__(self, attr: str) -> Any:
        return getattr(_real(self.__name__), attr)


def _real(name: str) -> types.ModuleType:
    """The real module `name`, importing it in place of its stand-in on first call. Every attribute
    read through a stand-in lands here, so the path for an already real module is one dict lookup."""
    module = sys.modules.get(name)
    if module is not None and not isinstance(module, _StandIn):
        return module
    with _lock:
        if not isinstance(sys.modules.get(name), _StandIn):
            return importlib.import_module(name)
        del sys.modules[name]
        prefix = name + "."
        for key in [k for k in sys.modules if k.startswith(prefix)]:
            if isinstance(sys.modules[key], _StandIn):  # a deferred subpackage's own __init__ runs too
                del sys.modules[key]
        module = importlib.import_module(name)
        for key, child in [(k, m) for k, m in sys.modules.items() if k.startswith(prefix)]:
            parent_name, _, attr = key.rpartition(".")  # a submodule loaded under a stand-in: bind it
            parent = sys.modules.get(parent_name)
            if parent is not None and attr not in vars(parent):
                setattr(parent, attr, child)
        return module


class _SubmoduleHook:
    """Meta-path hook: importing `pkg.sub` while `pkg` is a stand-in imports the real `pkg` first, so
    no submodule runs without its package's `__init__`, except under a deferred-init stand-in."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        parts = fullname.split(".")
        for depth in range(1, len(parts)):
            parent = sys.modules.get(".".join(parts[:depth]))
            if isinstance(parent, _StandIn) and not parent._deferred_init:
                _real(parent.__name__)
                break
        return None  # the regular finders do the actual import


def _stand_in(name: str, deferred_init: bool = False, **attrs: Any) -> None:
    parent = name.rpartition(".")[0]
    if name in sys.modules or (parent and not isinstance(sys.modules.get(parent), _StandIn)):
        return
    spec = importlib.util.find_spec(name)
    if spec is None:
        return  # not installed: the real import fails where it is used
    module = _StandIn(name)
    module._deferred_init = deferred_init
    module.__spec__ = spec  # importlib.util.find_spec(name) and `import name` keep working
    module.__file__ = spec.origin
    module.__path__ = list(spec.submodule_search_locations or [])  # `from name import x` stays lazy
    for key, value in attrs.items():
        setattr(module, key, value)
    sys.modules[name] = module
    if not any(isinstance(f, _SubmoduleHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _SubmoduleHook())


class _ForwardingMeta(type):
    """A stand-in class: calls, attribute reads and isinstance/issubclass go to the real class of
    the same name in `_package` (importing it)."""

    def _target(cls) -> Any:
        return getattr(_real(cls._package), cls.__name__)

    def __getattr__(cls, attr: str) -> Any:
        return getattr(cls._target(), attr)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls._target()(*args, **kwargs)

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls._target())

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, cls._target())


def _forwarding_class(package: str, name: str) -> type:
    return _ForwardingMeta(name, (), {"_package": package, "__module__": package, "__qualname__": name})


# ------------------------------------------------------------------ transformers.AutoTokenizer
class _AutoTokenizerMeta(type):
    def __getattr__(cls, attr: str) -> Any:
        return getattr(_real("transformers").AutoTokenizer, attr)


class AutoTokenizer(metaclass=_AutoTokenizerMeta):
    """`transformers.AutoTokenizer` with a torch-free `from_pretrained` (see `load_tokenizer`)."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: Any, *inputs: Any, **kwargs: Any) -> Any:
        return load_tokenizer(pretrained_model_name_or_path, *inputs, **kwargs)


# ------------------------------------------------------------------ httpx CLI
def _httpx_main_stand_in() -> None:
    if "httpx" in sys.modules or "httpx._main" in sys.modules:
        return
    module = types.ModuleType("httpx._main")

    def main(*args: Any, **kwargs: Any) -> Any:  # pragma: no cover - the `httpx` console script
        with _lock:
            if sys.modules.get("httpx._main") is module:
                del sys.modules["httpx._main"]
        return importlib.import_module("httpx._main").main(*args, **kwargs)

    module.main = main  # type: ignore[attr-defined]
    sys.modules["httpx._main"] = module


# ------------------------------------------------------------------ tokenizers
def load_tokenizer(name: Any, *inputs: Any, **kwargs: Any) -> Any:
    """What `transformers.AutoTokenizer.from_pretrained(name, *inputs, **kwargs)` returns (module doc)."""
    simple = not inputs and not kwargs and isinstance(name, str | os.PathLike)
    if not simple:
        return _real("transformers").AutoTokenizer.from_pretrained(name, *inputs, **kwargs)
    key = os.fspath(name)
    with _lock:
        if key not in _loaded:
            _loaded[key] = _load_simple(key)
        return _loaded[key]


class TokenizerUnavailable(OSError):
    """A tokenizer that cannot be loaded, named with the option that sets it (one line)."""


def _load_simple(name: str) -> Any:
    directory = Path(name)
    if not directory.is_dir():
        try:
            return _real("transformers").AutoTokenizer.from_pretrained(name)
        except OSError as exc:  # not a folder here, and the hub is unreachable or has no such repo
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TokenizerUnavailable(
                f"cannot load the tokenizer {name!r}: it is not a folder here and the hub gave: {first} "
                "(set --env.tokenizer_name to a local model folder; it defaults to --openai.model_name)"
            ) from exc
    versions = _versions()
    memo_key = f"{versions}|{directory.resolve()}"
    stamp = _stamp(directory)
    chosen = _memo_read().get(memo_key)
    if chosen and chosen.get("stamp") == stamp:

        def load_real() -> Any:
            module_name, _, qualname = chosen["class"].partition(":")
            cls: Any = importlib.import_module(module_name)
            for part in qualname.split("."):
                cls = getattr(cls, part)
            # the arguments AutoTokenizer passes for a local directory (its revision resolves to itself)
            return cls.from_pretrained(name, _from_auto=True, revision=None)

        state = _snapshot_read(chosen.get("snapshot"))
        if state is not None:
            from environments.atropos_runtime.tokenizer_snapshot import SnapshotTokenizer

            return SnapshotTokenizer(state, load_real)
        return load_real()
    tokenizer = _real("transformers").AutoTokenizer.from_pretrained(name)
    cls = type(tokenizer)
    if cls.__module__.startswith("transformers."):
        entry = {"class": f"{cls.__module__}:{cls.__qualname__}", "stamp": stamp, "snapshot": None}
        entry["snapshot"] = _snapshot_write(memo_key, tokenizer)
        _memo_write(memo_key, entry)
    return tokenizer


def _versions() -> str:
    """The versions of everything a tokenizer's behaviour depends on, read without importing them."""
    from importlib.metadata import version

    return ",".join(f"{pkg}={version(pkg)}" for pkg in ("transformers", "tokenizers", "jinja2"))


def _snapshot_write(memo_key: str, tokenizer: Any) -> str | None:
    """Store a verified SnapshotTokenizer state for `tokenizer`; its file name, or None."""
    from environments.atropos_runtime.tokenizer_snapshot import SnapshotTokenizer, snapshot

    state = snapshot(tokenizer)
    if state is None:
        return None
    copy = SnapshotTokenizer(state, lambda: tokenizer)
    problems = copy.disagreements(tokenizer)
    if problems:
        import logging

        logging.getLogger("rlvr").info("tokenizer snapshot not used (%s)", "; ".join(problems[:3]))
        return None
    file_name = "tokenizer-" + hashlib.sha256(memo_key.encode()).hexdigest()[:20] + ".json"
    try:
        _atomic_write(_memo_path().parent / file_name, json.dumps(state))
    except OSError:
        return None
    return file_name


def _snapshot_read(file_name: str | None) -> dict[str, Any] | None:
    if not file_name:
        return None
    try:
        return json.loads((_memo_path().parent / file_name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _stamp(directory: Path) -> list[list[Any]]:
    """Size and mtime of every file that can steer AutoTokenizer's class choice."""
    rows = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.is_file() and entry.name.endswith(_STAMPED_SUFFIXES):
            st = entry.stat()
            rows.append([entry.name, st.st_size, st.st_mtime_ns])
    return rows


def _memo_path() -> Path:
    root = os.environ.get("RLVR_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "rlvr-envs")
    return Path(root) / f"tokenizer_classes.v{_MEMO_VERSION}.json"


def _memo_read() -> dict[str, Any]:
    try:
        data = json.loads(_memo_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _memo_write(key: str, value: dict[str, Any]) -> None:
    try:
        data = _memo_read()
        data[key] = value
        _atomic_write(_memo_path(), json.dumps(data, indent=1, sort_keys=True))
    except OSError:
        pass  # a read-only home only costs the next run the slow path
