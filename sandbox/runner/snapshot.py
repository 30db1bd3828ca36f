"""The session snapshot: which modules, classes and bound-method owners a session child can reach,
copied in the harness process and compared by identity in the child (`_Snapshot`), with CPython's
dict stamps as the fast path (`_dict_stamps`). Stdlib only."""

from __future__ import annotations

import gc
import sys
from itertools import islice
from operator import is_ as _is
from types import MethodType as _MethodType
from types import ModuleType as _ModuleType

_object_getattr = object.__getattribute__
_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: static built-in types, no attribute can change


def _dict_stamps():
    """`stamp(d)`: a reader whose `.value` is CPython's modification stamp of dict `d` (PEP 509
    `ma_version_tag`: every insert, rebind or delete gives the dict a new value from a global counter,
    so an unchanged value means an unmodified dict), read without touching anything the dict holds.
    None where this interpreter's layout is not the one verified here (every check then compares).

    Readers are made only in the harness process: making one is an audited ctypes event, which a
    session child's hook counts as a hack; reading one is not."""
    if sys.implementation.name != "cpython" or not (3, 9) <= sys.version_info[:2] <= (3, 13):
        return None
    if hasattr(sys, "gettotalrefcount") or sys.maxsize != (1 << 63) - 1:
        return None  # a debug build (bigger object header) or not 64-bit
    try:
        import ctypes
    except ImportError:
        return None
    used_at, stamp_at = 16, 24  # PyDictObject: ob_refcnt, ob_type, ma_used, ma_version_tag

    def stamp(d: dict):
        return ctypes.c_uint64.from_address(id(d) + stamp_at)

    try:  # verify the layout: ma_used tracks len(), the stamp moves on every kind of change
        d: dict = {}
        used, reader = ctypes.c_ssize_t.from_address(id(d) + used_at), stamp(d)
        seen = [reader.value]
        for change in (
            lambda: d.__setitem__("a", 1),
            lambda: d.__setitem__("a", 2),
            lambda: d.update(b=3),
            lambda: d.pop("a"),
            lambda: d.__delitem__("b"),
            lambda: d.setdefault("c", 4),
            lambda: d.clear(),
        ):
            change()
            if used.value != len(d) or reader.value in seen:
                return None
            seen.append(reader.value)
        if ctypes.c_ssize_t.from_address(id(sys.modules) + used_at).value != len(sys.modules):
            return None
    except Exception:  # noqa: BLE001 - anything unexpected: no fast path
        return None
    return stamp


def _class_dict(klass: type) -> dict | None:
    """The dict behind `klass.__dict__` (a mappingproxy), or None. Harness process only."""
    proxy = klass.__dict__
    inner = gc.get_referents(proxy)
    return inner[0] if len(inner) == 1 and type(inner[0]) is dict and len(inner[0]) == len(proxy) else None


_STAMP = _dict_stamps()


class _Snapshot:
    """Identity snapshot of what a session can reach: the namespace of each module, of the classes
    it holds (mutable ones: built-in static types cannot change), and of the instances behind its
    bound methods (`random.randint` is `random._inst.randint`), plus which module object each
    `sys.modules` name maps to. Each is kept as a shallow copy, compared by identity.

    Built in the harness process (which never runs untrusted code; `update`) and, in each session
    child, brought up to date before the solution runs (`refresh`) for the modules that session
    can reach (`reach`). Checking (`changed`) compares by identity, and on a difference looks at
    keys of exact type str only, so it never calls anything a solution defined. Any rebinding,
    removal or new name is a change, except what the interpreter itself adds: a loaded submodule's
    attribute on its package, `__warningregistry__`, `__slotnames__` (copyreg), and an instance's
    own data attributes that shadow nothing of its class (`random.gauss` state).

    Fast path (`_STAMP`, CPython): each namespace copied in the harness process, and `sys.modules`,
    keeps its dict's modification stamp from when its copy was last known to match; a namespace
    whose stamp has not moved is unmodified and is not walked. Walking one in a session child costs a
    copy-on-write page fault per page its keys and values live on (their reference counts are
    written), most of a session's set-up; reading a stamp touches no object. Changing a dict without
    moving its stamp takes a raw memory write (ctypes, which the hook stops, or an interpreter bug,
    which could as well rewrite the copies)."""

    def __init__(self) -> None:
        # module -> ([space, copy, label, stamp reader or None, stamp], [owned])
        self.groups: dict[str, tuple[list, list]] = {}
        self.modules: dict[str, object] = {}
        self.active: tuple[str, ...] = ()  # the modules `changed` checks
        self._reach: dict[tuple, tuple[str, ...]] = {}
        self._seen: set[int] = set()
        self._loaded_dict = sys.modules
        self._loaded = _STAMP(sys.modules) if _STAMP else None  # sys.modules' stamp reader
        self._loaded_at = None  # its stamp when `update` last walked it (or `register` added to it)
        self._registered: list[str] = []  # names `register` added since that walk
        self._modules_at = None  # its stamp when `self.modules` was last known to match (`accept`)

    @staticmethod
    def _same(space, copy, _len=len, _all=all, _map=map, _is=_is) -> bool:
        """Same keys and values, by identity and in order (builtins bound here: patching them does
        nothing; no `id()`, which is an audited event: the hook would run for every object)."""
        return (
            _len(space) == _len(copy)
            and _all(_map(_is, space, copy))
            and _all(_map(_is, space.values(), copy.values()))
        )

    def update(self, stamps: bool = True) -> None:
        """Add the modules loaded since the last call (and what they hold), in load order. Only the
        names are walked to find them: walking the items would write the reference count of every
        module object (in a session child, a copied page each); not even those when the stamp of
        `sys.modules` has not moved. `stamps=False` (a session child): no stamp readers are made."""
        seen, loaded, known = self._seen, sys.modules, self.modules
        watched = self._loaded is not None and loaded is self._loaded_dict
        if watched and self._loaded_at is not None and self._loaded.value == self._loaded_at:
            new = [name for name in self._registered if name not in known]  # no other change
        else:
            new = [name for name in loaded if name not in known]
        self._registered = []
        stamp = _STAMP if stamps else None
        for name in new:
            module = loaded[name]
            self.modules[name] = module
            spaces: list = []
            owned: list = []
            self.groups[name] = (spaces, owned)
            if type(module) is not _ModuleType:
                continue
            reader = stamp(module.__dict__) if stamp else None
            spaces.append(
                [
                    module.__dict__,
                    dict(module.__dict__),
                    name,
                    reader,
                    reader.value if reader is not None else None,
                ]
            )
            for value in list(module.__dict__.values()):
                if isinstance(value, type):
                    if value.__flags__ & _IMMUTABLE_TYPE or id(value) in seen:
                        continue
                    seen.add(id(value))
                    inner = _class_dict(value) if stamp else None
                    reader = stamp(inner) if inner is not None else None
                    spaces.append(
                        [
                            value.__dict__,
                            dict(value.__dict__),
                            None,
                            reader,
                            reader.value if reader is not None else None,
                        ]
                    )
                elif type(value) is _MethodType:
                    owner = value.__self__
                    space = getattr(owner, "__dict__", None)
                    if type(space) is dict and id(space) not in seen:
                        seen.add(id(space))
                        owned.append([owner, type(owner), space, dict(space)])
        if watched:
            self._loaded_at = self._loaded.value

    def reach(self, roots: tuple[str, ...], depth: int = 2) -> tuple[str, ...]:
        """`roots` and the modules their namespaces refer to (modules, or the `__module__` of what
        they hold), `depth` steps out; cached per roots (call in the harness process)."""
        if roots not in self._reach:
            names = {r for r in roots if r in sys.modules}
            frontier = list(names)
            for _ in range(depth):
                found = []
                for name in frontier:
                    module = sys.modules.get(name)
                    if type(module) is not _ModuleType:
                        continue
                    for value in list(module.__dict__.values()):
                        other = (
                            value.__name__
                            if type(value) is _ModuleType
                            else getattr(value, "__module__", None)
                        )
                        if type(other) is str and other not in names and other in sys.modules:
                            names.add(other)
                            found.append(other)
                frontier = found
            self._reach[roots] = tuple(sorted(names))
        return self._reach[roots]

    def register(self, module: _ModuleType) -> None:
        """`sys.modules[module.__name__] = module` by the harness: the next `update` then need not
        walk `sys.modules` to find it, if nothing else changed it since the last walk."""
        exact = self._loaded is not None and sys.modules is self._loaded_dict
        exact = exact and self._loaded_at is not None and self._loaded.value == self._loaded_at
        sys.modules[module.__name__] = module
        if exact:
            self._registered.append(module.__name__)
            self._loaded_at = self._loaded.value

    def assign(self, module: _ModuleType, values: dict) -> None:
        """Set attributes of `module` (the harness, in a child, before the solution) and, if its copy
        was current, bring the copy up to date without walking the namespace."""
        group = self.groups.get(module.__name__)
        entry = group[0][0] if group and group[0] and group[0][0][0] is module.__dict__ else None
        current = entry is not None and entry[3] is not None and entry[3].value == entry[4]
        for key, value in values.items():
            setattr(module, key, value)
        if current:
            entry[1].update(values)
            entry[4] = entry[3].value

    def refresh(self, names: tuple[str, ...]) -> None:
        """Accept the current state of `names` (and modules loaded since `update`) as pristine: the
        child, before any untrusted code runs. From now on `changed` checks those."""
        count = len(self.modules)
        self.update(stamps=False)
        added = len(self.modules) - count  # `modules` keeps load order: the newest are last
        names = (*names, *reversed(list(islice(reversed(self.modules), added))))
        for name in names:
            group = self.groups.get(name)
            if group is None:
                continue
            if sys.modules.get(name) is not self.modules[name]:
                self.modules[name] = sys.modules.get(name)
            for entry in group[0]:
                reader = entry[3]
                if reader is not None and reader.value == entry[4]:
                    continue  # not modified since its copy was made
                if not self._same(entry[0], entry[1]):
                    entry[1] = dict(entry[0])
                if reader is not None:
                    entry[4] = reader.value
            for entry in group[1]:
                entry[1], entry[3] = type(entry[0]), dict(entry[2])
        self.active = names
        self.accept_modules()

    def accept_modules(self) -> None:
        """Note that `sys.modules` matches `self.modules` for the active names now (the harness
        calls it again after adding a module of its own): `changed` skips the lookups while the stamp
        of `sys.modules` stays put."""
        if self._loaded is not None and sys.modules is self._loaded_dict:
            self._modules_at = self._loaded.value

    def changed(self, only=None, _type=type, _str=str, _module=_ModuleType, _vars=vars) -> str | None:
        """What was rebound, added or removed since `refresh` in the active modules (or in `only`,
        a subset of them), or None."""
        same, groups, modules = self._same, self.groups, sys.modules
        loaded = self._loaded
        lookups = not (
            loaded is not None and modules is self._loaded_dict and loaded.value == self._modules_at
        )
        for module_name in self.active if only is None else only:
            if lookups and modules.get(module_name) is not self.modules[module_name]:
                return f"replaced module {module_name:.80}"
            spaces, owned = groups[module_name]
            for entry in spaces:
                space, copy, name, reader, stamp = entry
                if reader is not None and reader.value == stamp:
                    continue  # not modified since it last matched its copy
                if same(space, copy):
                    continue
                for key, value in space.items():
                    if _type(key) is not _str:
                        return f"non-string name in {name or 'a class'}"
                    if key in copy:
                        if copy[key] is not value and key != "__warningregistry__":
                            return f"rebound {name or 'a class'}.{key}"[:200]
                    elif not (
                        key in ("__warningregistry__", "__slotnames__")
                        or (name and _type(value) is _module and value.__name__ == name + "." + key)
                    ):
                        return f"added {name or 'a class'}.{key}"[:200]
                for key in copy:
                    if key not in space:
                        return f"removed {name or 'a class'}.{key}"[:200]
                entry[1] = dict(space)  # only what the interpreter adds: accepted
                if reader is not None:
                    entry[4] = reader.value
            for owner, kind, space, copy in owned:  # classes come first, verified: no user code runs
                if _type(owner) is not kind or _object_getattr(owner, "__dict__") is not space:
                    return f"replaced the namespace of a {kind.__name__:.80}"
                if same(space, copy):
                    continue
                for key in space:
                    if _type(key) is not _str:
                        return f"non-string name in a {kind.__name__:.80}"
                    for klass in kind.__mro__:
                        if key in _vars(klass) and copy.get(key, space) is not space[key]:
                            return f"shadowed {kind.__name__}.{key} on an instance"[:200]
        return None


_PRISTINE: list[_Snapshot] = []  # the harness process's snapshot, reused by every session child
_ROOTS: list[tuple[str, ...]] = []  # `_roots()`, once every module of this package is loaded


def _roots() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What an assert session reaches: builtins, sys and the harness (every module of this package)
    and, through them, their modules; what a call session reaches: those and the encoder (json)."""
    if not _ROOTS:
        package = __name__.rpartition(".")[0]
        mine = tuple(sorted(n for n in sys.modules if n == package or n.startswith(package + ".")))
        _ROOTS.append(("builtins", "sys", *mine))
        _ROOTS.append((*_ROOTS[0], "json", "json.encoder"))
    return _ROOTS[0], _ROOTS[1]


def _pristine(spec: dict, chunk: list) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """In the harness process, before a session's fork: import what its trusted test code and
    setup import (so the test gets the pristine module, not one the solution loaded and patched),
    bring the snapshot up to date, and return the modules that session can reach and the ones
    its test code uses directly (checked after every call of the entry point)."""
    if not _PRISTINE:
        _PRISTINE.append(_Snapshot())
    codes = [t["code"] for _, t in chunk if t["kind"] == "assert"]
    names = _test_imports([*codes, spec.get("setup") or ""] if codes else [])
    snapshot = _PRISTINE[0]
    known = len(snapshot.modules)
    snapshot.update()
    # call tests are judged on the host: only what the harness itself runs on in the child matters
    roots, call_roots = _roots()
    reach = snapshot.reach((*roots, *names)) if codes else snapshot.reach(call_roots, depth=0)
    if len(snapshot.modules) != known:
        gc.freeze()  # the copies live as long as this process: no collection in a child walks them
    return reach, tuple(n for n in (*roots, *names) if n in reach)


_IMPORTS = None  # compiled lazily: `import a, b.c` / `from a import b` lines of trusted code


def _test_imports(codes: list[str]) -> tuple[str, ...]:
    """Import the modules `codes` import (trusted test or setup code); their names."""
    import re

    global _IMPORTS
    if _IMPORTS is None:
        _IMPORTS = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import|import[ \t]+([\w., \t]+))", re.M)
    found = []
    for code in codes:
        for match in _IMPORTS.finditer(code):
            names = [match.group(1)] if match.group(1) else match.group(2).split(",")
            for name in names:
                name = name.split()[0] if name.split() else ""
                if name and not name.startswith(".") and name not in found:
                    try:
                        __import__(name)
                        found.append(name)
                    except Exception:  # noqa: BLE001 - the test itself will report it
                        pass
    return tuple(found)
