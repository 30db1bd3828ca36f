"""The session snapshot's fast path (`sandbox/runner/snapshot.py`, `_STAMP`): a namespace whose dict stamp has
not moved is not walked, so the stamp must move on every kind of change, and `changed` must still
name each change. In-process on the host (the same harness code the sandbox runs; no hook here)."""

from __future__ import annotations

import sys
import types

import pytest

from sandbox.runner import snapshot as runner

pytestmark = pytest.mark.skipif(runner._STAMP is None, reason="no dict stamps on this interpreter")


NAME = "rlvr_probe"


def _fresh() -> types.ModuleType:
    module = types.ModuleType(NAME)
    module.a, module.b, module.Probe = object(), object(), type("Probe", (), {"x": 1})
    return module


# name -> change to a module (or its class); every one must be seen
CHANGES = {
    "setattr": lambda m: setattr(m, "a", object()),
    "dict setitem": lambda m: m.__dict__.__setitem__("a", object()),
    "delattr": lambda m: delattr(m, "a"),
    "new name": lambda m: setattr(m, "c", 1),
    "update": lambda m: m.__dict__.update(a=1),
    "in-place or": lambda m: m.__dict__.__ior__({"b": 2}),
    "pop": lambda m: m.__dict__.pop("b"),
    "popitem": lambda m: m.__dict__.popitem(),
    "setdefault": lambda m: m.__dict__.setdefault("z", 0),
    "dict.__init__": lambda m: dict.__init__(m.__dict__, a=3),
    "exec in its globals": lambda m: exec("a = 4", m.__dict__),
    "global statement": lambda m: exec("def g():\n    global b\n    b = 5\ng()", m.__dict__),
    "clear and restore": lambda m: (lambda kept: (m.__dict__.clear(), m.__dict__.update(c=kept)))(1),
    "class setattr": lambda m: setattr(m.Probe, "x", 2),
    "class type.__setattr__": lambda m: type.__setattr__(m.Probe, "y", 2),
    "class delattr": lambda m: delattr(m.Probe, "x"),
}


@pytest.mark.parametrize("name", CHANGES)
def test_stamp_moves_on_every_kind_of_change(name):
    module = _fresh()
    readers = [runner._STAMP(module.__dict__), runner._STAMP(runner._class_dict(module.Probe))]
    before = [r.value for r in readers]
    CHANGES[name](module)
    assert [r.value for r in readers] != before, name


def test_stamp_stays_when_nothing_changes():
    module = _fresh()
    reader = runner._STAMP(module.__dict__)
    before = reader.value
    _ = (module.a, list(module.__dict__.items()), dict(module.__dict__), module.Probe.x)
    module.a = module.a  # the same object again: no change
    assert reader.value == before


@pytest.mark.parametrize("name", CHANGES)
def test_snapshot_names_each_change(name):
    module = _fresh()
    sys.modules[NAME] = module
    try:
        snapshot = runner._Snapshot()
        snapshot.update()
        assert all(entry[3] is not None for entry in snapshot.groups[NAME][0])  # the fast path is on
        snapshot.refresh((NAME,))
        assert snapshot.changed() is None
        CHANGES[name](module)
        assert snapshot.changed() is not None, name
    finally:
        del sys.modules[NAME]


def test_snapshot_sees_a_replaced_or_new_module():
    module = _fresh()
    sys.modules[NAME] = module
    try:
        snapshot = runner._Snapshot()
        snapshot.update()
        snapshot.refresh((NAME,))
        extra = types.ModuleType("rlvr_probe_extra")
        snapshot.register(extra)  # the harness's own module: accepted without a walk
        snapshot.accept_modules()
        assert snapshot.changed() is None
        sys.modules[NAME] = _fresh()
        assert "replaced module" in (snapshot.changed() or "")
    finally:
        sys.modules.pop(NAME, None)
        sys.modules.pop("rlvr_probe_extra", None)
