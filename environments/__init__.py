"""Atropos environments (serve / process / evaluate) and their Verifiers front doors."""

from environments._atropos_lazy import install as _install_lazy_imports

_install_lazy_imports()  # before anything imports atroposlib: see environments/_atropos_lazy.py
