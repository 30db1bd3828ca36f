"""Atropos environments (serve / process / evaluate) and their Verifiers front doors."""
